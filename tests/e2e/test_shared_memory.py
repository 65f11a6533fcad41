"""Triton's shared memory extension, driven by tritonclient's public API only.

A client registers POSIX shared memory regions (tritonclient.utils.shared_memory),
passes inputs and receives outputs by reference, over HTTP and gRPC, INT32 and
BYTES; bad offsets and small output regions are 400s naming the region; the
extension is off by default, and a key prefix keeps clients to their own keys.
CUDA shared memory's clean-up and status calls work with nothing registered, as
Triton's examples need; registering CUDA memory needs a GPU (unit tests fake one).
"""

from __future__ import annotations

import base64
import gc
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import (
    InferenceServerException,
    serialize_byte_tensor,
    serialized_byte_size,
)

from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server
from tests.support.triton_shm import shared_memory as shm

from .across_processes import TWO_PROTOCOL_PROCESSES

PREFIX = f"/inferd-e2e-{os.getpid()}-"
ROW = 16  # INT32 elements per input, as Triton's simple example
ROW_BYTES = ROW * 4


def write_models(repository: Path) -> Path:
    """`simple` (Triton's add_sub example model) and `echo`."""
    add_custom_model(repository, "simple", "AddSub")
    add_custom_model(repository, "echo", "Echo")
    return repository


@pytest.fixture(
    scope="module",
    params=[{"parallel_workers": 0}, {"parallel_workers": 1}, TWO_PROTOCOL_PROCESSES],
    ids=["in-process", "worker", "2-protocol-processes"],
)
def shm_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """Shared memory on, keys limited to PREFIX; inference in the main process, in a
    worker, or in two protocol processes (a region registered through one is used
    through the other)."""
    repository = write_models(tmp_path_factory.mktemp("shm"))
    settings = {
        "shared_memory_enabled": True,
        "shared_memory_key_prefix": PREFIX,
        **request.param,
    }
    with start_server(repository, settings) as process:
        yield process


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, shm_server: ServerProcess) -> Iterator[Any]:
    if request.param == "http":
        http = httpclient.InferenceServerClient(f"127.0.0.1:{shm_server.http_port}")
        yield http
        http.unregister_system_shared_memory()
        http.close()
    else:
        grpc = grpcclient.InferenceServerClient(shm_server.grpc_address)
        yield grpc
        grpc.unregister_system_shared_memory()
        grpc.close()


def module_of(client: Any) -> Any:
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


@pytest.fixture
def regions(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Shared memory objects made for one test (name -> handle), destroyed after it."""
    made: dict[str, Any] = {}
    yield made
    for handle in made.values():
        shm.destroy_shared_memory_region(handle)


def create(regions: dict[str, Any], name: str, size: int) -> tuple[Any, str]:
    key = f"{PREFIX}{name}"
    regions[name] = shm.create_shared_memory_region(name, key, size)
    return regions[name], key


def names(status: Any) -> set[str]:
    """Region names of a status answer (HTTP: a list; gRPC: a message with a map)."""
    if isinstance(status, list):
        return {region["name"] for region in status}
    return set(status.regions)


def test_int32_inputs_and_outputs_by_reference(client: Any, regions: dict[str, Any]) -> None:
    """Triton's simple_*_shm_client: two inputs in one region, two outputs in another."""
    lib = module_of(client)
    first = np.arange(ROW, dtype=np.int32).reshape(1, ROW)
    second = np.full((1, ROW), 3, dtype=np.int32)
    inputs, input_key = create(regions, "input_data", 2 * ROW_BYTES)
    outputs, output_key = create(regions, "output_data", 2 * ROW_BYTES)
    shm.set_shared_memory_region(inputs, [first, second])
    client.register_system_shared_memory("input_data", input_key, 2 * ROW_BYTES)
    client.register_system_shared_memory("output_data", output_key, 2 * ROW_BYTES)
    assert names(client.get_system_shared_memory_status()) == {"input_data", "output_data"}

    infer_inputs = [lib.InferInput("INPUT0", [1, ROW], "INT32"),
                    lib.InferInput("INPUT1", [1, ROW], "INT32")]  # fmt: skip
    infer_inputs[0].set_shared_memory("input_data", ROW_BYTES)
    infer_inputs[1].set_shared_memory("input_data", ROW_BYTES, offset=ROW_BYTES)
    requested = [lib.InferRequestedOutput("OUTPUT0"), lib.InferRequestedOutput("OUTPUT1"),
                 lib.InferRequestedOutput("source")]  # fmt: skip
    requested[0].set_shared_memory("output_data", ROW_BYTES)
    requested[1].set_shared_memory("output_data", ROW_BYTES, offset=ROW_BYTES)
    result = client.infer("simple", infer_inputs, outputs=requested)

    total = shm.get_contents_as_numpy(outputs, np.int32, [1, ROW])
    difference = shm.get_contents_as_numpy(outputs, np.int32, [1, ROW], offset=ROW_BYTES)
    np.testing.assert_array_equal(total, first + second)
    np.testing.assert_array_equal(difference, first - second)
    # The model read the client's memory itself, in a worker process too (no copy).
    assert result.as_numpy("source").tolist() == [b"mmap"]
    output = result.get_output("OUTPUT1")
    parameters = output["parameters"] if isinstance(output, dict) else output.parameters
    region = parameters["shared_memory_region"]
    assert getattr(region, "string_param", region) == "output_data"

    client.unregister_system_shared_memory("input_data")
    assert names(client.get_system_shared_memory_status()) == {"output_data"}
    with pytest.raises(InferenceServerException, match="'input_data'"):
        client.infer("simple", infer_inputs, outputs=requested)


def test_bytes_inputs_and_outputs_by_reference(client: Any, regions: dict[str, Any]) -> None:
    lib = module_of(client)
    text = np.array([b"shared", b"", "mémoire".encode()], dtype=object)
    serialized = serialize_byte_tensor(text)
    size = serialized_byte_size(serialized)
    inputs, input_key = create(regions, "text_in", size)
    outputs, output_key = create(regions, "text_out", size + 8)
    shm.set_shared_memory_region(inputs, [serialized])
    client.register_system_shared_memory("text_in", input_key, size)
    client.register_system_shared_memory("text_out", output_key, size + 8)
    infer_input = lib.InferInput("text", [3], "BYTES")
    infer_input.set_shared_memory("text_in", size)
    requested = lib.InferRequestedOutput("text")
    requested.set_shared_memory("text_out", size + 8)
    client.infer("echo", [infer_input], outputs=[requested])
    echoed = shm.get_contents_as_numpy(outputs, np.object_, [3])
    assert echoed.tolist() == text.tolist()


def test_out_of_range_offset_is_400_naming_the_region(client: Any, regions: dict[str, Any]) -> None:
    lib = module_of(client)
    _, key = create(regions, "small", ROW_BYTES)
    client.register_system_shared_memory("small", key, ROW_BYTES)
    infer_inputs = [lib.InferInput(name, [1, ROW], "INT32") for name in ("INPUT0", "INPUT1")]
    for infer_input in infer_inputs:
        infer_input.set_shared_memory("small", ROW_BYTES, offset=8)
    with pytest.raises(InferenceServerException, match="region: 'small'") as raised:
        client.infer("simple", infer_inputs)
    assert raised.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def test_too_small_output_region_is_400_naming_the_region(
    client: Any, regions: dict[str, Any]
) -> None:
    lib = module_of(client)
    inputs, input_key = create(regions, "in", ROW_BYTES)
    _, output_key = create(regions, "tiny", ROW_BYTES)
    shm.set_shared_memory_region(inputs, [np.ones((1, ROW), dtype=np.int32)])
    client.register_system_shared_memory("in", input_key, ROW_BYTES)
    client.register_system_shared_memory("tiny", output_key, ROW_BYTES)
    infer_inputs = [lib.InferInput(name, [1, ROW], "INT32") for name in ("INPUT0", "INPUT1")]
    for infer_input in infer_inputs:
        infer_input.set_shared_memory("in", ROW_BYTES)
    requested = lib.InferRequestedOutput("OUTPUT0")
    requested.set_shared_memory("tiny", ROW_BYTES // 2)
    with pytest.raises(InferenceServerException, match="region 'tiny'") as raised:
        client.infer("simple", infer_inputs, outputs=[requested])
    assert raised.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    # Registering past the object's end is refused too, before anything is mapped.
    with pytest.raises(InferenceServerException, match="holds 64 bytes"):
        client.register_system_shared_memory("past", output_key, ROW_BYTES, offset=8)


def test_keys_outside_the_prefix_are_refused(client: Any, regions: dict[str, Any]) -> None:
    name = f"inferd-e2e-other-{os.getpid()}"
    regions[name] = shm.create_shared_memory_region(name, f"/{name}", ROW_BYTES)
    with pytest.raises(InferenceServerException, match="shared_memory_key_prefix"):
        client.register_system_shared_memory(name, f"/{name}", ROW_BYTES)
    with pytest.raises(InferenceServerException, match="not a POSIX shared memory name"):
        client.register_system_shared_memory("escape", f"{PREFIX}x/../../etc/passwd", 1)
    assert names(client.get_system_shared_memory_status()) == set()


def test_cuda_clean_up_calls_succeed_with_nothing_registered(client: Any) -> None:
    """What Triton's examples call first: clearing both kinds, whatever was registered."""
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never-registered")
    assert names(client.get_cuda_shared_memory_status()) == set()
    with pytest.raises(
        InferenceServerException, match="Unable to find cuda shared memory region"
    ) as raised:
        client.get_cuda_shared_memory_status("never-registered")
    assert raised.value.status() in ("404", "StatusCode.NOT_FOUND")
    # Registering a handle no process made: 400, without a GPU as "not supported on
    # this server" saying what is missing, with one as a handle that cannot be opened.
    handle = base64.b64encode(b"\1" * 64)
    with pytest.raises(InferenceServerException, match="CUDA") as raised:
        client.register_cuda_shared_memory("gpu", handle, 0, 64)
    assert raised.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert names(client.get_cuda_shared_memory_status()) == set()


def test_tritons_shm_example_sequence(client: Any, regions: dict[str, Any]) -> None:
    """simple_{http,grpc}_shm_client.py's calls, in its order: clear both kinds, register
    an output and an input region, infer, read the outputs, check status, clear."""
    lib = module_of(client)
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    outputs, output_key = create(regions, "output_data", 2 * ROW_BYTES)
    client.register_system_shared_memory("output_data", output_key, 2 * ROW_BYTES)
    first = np.arange(ROW, dtype=np.int32).reshape(1, ROW)
    second = np.ones((1, ROW), dtype=np.int32)
    inputs, input_key = create(regions, "input_data", 2 * ROW_BYTES)
    shm.set_shared_memory_region(inputs, [first])
    shm.set_shared_memory_region(inputs, [second], offset=ROW_BYTES)
    client.register_system_shared_memory("input_data", input_key, 2 * ROW_BYTES)
    infer_inputs = [lib.InferInput("INPUT0", [1, ROW], "INT32"),
                    lib.InferInput("INPUT1", [1, ROW], "INT32")]  # fmt: skip
    infer_inputs[0].set_shared_memory("input_data", ROW_BYTES)
    infer_inputs[1].set_shared_memory("input_data", ROW_BYTES, offset=ROW_BYTES)
    requested = [lib.InferRequestedOutput("OUTPUT0"), lib.InferRequestedOutput("OUTPUT1")]
    requested[0].set_shared_memory("output_data", ROW_BYTES)
    requested[1].set_shared_memory("output_data", ROW_BYTES, offset=ROW_BYTES)
    result = client.infer("simple", infer_inputs, outputs=requested)
    for index, expected in enumerate((first + second, first - second)):
        output = result.get_output(f"OUTPUT{index}")
        assert output is not None
        shape = output["shape"] if isinstance(output, dict) else list(output.shape)
        values = shm.get_contents_as_numpy(outputs, np.int32, shape, offset=index * ROW_BYTES)
        np.testing.assert_array_equal(values, expected)
    assert names(client.get_system_shared_memory_status()) == {"input_data", "output_data"}
    assert names(client.get_cuda_shared_memory_status()) == set()
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    assert names(client.get_system_shared_memory_status()) == set()


def test_shared_memory_is_off_by_default(server: ServerProcess, regions: dict[str, Any]) -> None:
    _, key = create(regions, "off", ROW_BYTES)
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    grpc = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        for client in (http, grpc):
            with pytest.raises(InferenceServerException, match="shared_memory_enabled") as raised:
                client.register_system_shared_memory("off", key, ROW_BYTES)
            assert raised.value.status() in ("403", "StatusCode.PERMISSION_DENIED")
            # As Triton without the extension: the status calls list no region.
            assert names(client.get_system_shared_memory_status()) == set()
            assert names(client.get_cuda_shared_memory_status()) == set()
            with pytest.raises(InferenceServerException, match="region: 'off'") as raised:
                client.get_system_shared_memory_status("off")
            assert raised.value.status() in ("404", "StatusCode.NOT_FOUND")
            with pytest.raises(InferenceServerException, match="shared_memory_enabled") as raised:
                client.unregister_cuda_shared_memory()  # one switch for both kinds
            assert raised.value.status() in ("403", "StatusCode.PERMISSION_DENIED")
            infer_input = module_of(client).InferInput("x", [1, ROW], "INT32")
            infer_input.set_shared_memory("off", ROW_BYTES)
            with pytest.raises(InferenceServerException, match="turned off"):
                client.infer("echo", [infer_input])
        assert "system_shared_memory" not in http.get_server_metadata()["extensions"]
    finally:
        http.close()
        grpc.close()


def test_streams_take_and_answer_tensors_in_shared_memory(
    shm_server: ServerProcess, regions: dict[str, Any]
) -> None:
    """gRPC ModelStreamInfer (tritonclient's stream) and REST infer_stream."""
    # Closed HTTP clients of earlier tests must be collected here: tritonclient's __del__
    # fails (a warning) in the stream's callback thread.
    gc.collect()
    data = np.arange(ROW, dtype=np.int32).reshape(1, ROW)
    inputs, input_key = create(regions, "stream_in", ROW_BYTES)
    outputs, output_key = create(regions, "stream_out", ROW_BYTES)
    shm.set_shared_memory_region(inputs, [data])
    client = grpcclient.InferenceServerClient(shm_server.grpc_address)
    answers: list[Any] = []
    try:
        client.register_system_shared_memory("stream_in", input_key, ROW_BYTES)
        client.register_system_shared_memory("stream_out", output_key, ROW_BYTES)
        client.start_stream(callback=lambda result, error: answers.append(error or result))
        infer_input = grpcclient.InferInput("x", [1, ROW], "INT32")
        infer_input.set_shared_memory("stream_in", ROW_BYTES)
        requested = grpcclient.InferRequestedOutput("x")
        requested.set_shared_memory("stream_out", ROW_BYTES)
        client.async_stream_infer("echo", [infer_input], outputs=[requested])
        client.stop_stream()  # waits for the answers
        assert len(answers) == 1 and not isinstance(answers[0], Exception), answers
        np.testing.assert_array_equal(shm.get_contents_as_numpy(outputs, np.int32, [1, ROW]), data)

        body = {"inputs": [{"name": "x", "shape": [1, ROW], "datatype": "INT32",
                            "parameters": {"shared_memory_region": "stream_in",
                                           "shared_memory_byte_size": ROW_BYTES}}]}  # fmt: skip
        streamed = httpx.post(f"{shm_server.url}/v2/models/echo/infer_stream", json=body)
        assert streamed.status_code == 200, streamed.text
        assert json.loads(streamed.text.split("data: ", 1)[1])["outputs"][0]["data"] == list(
            range(ROW)
        )
    finally:
        client.unregister_system_shared_memory()
        client.close()
