"""``optional: true`` in a config.pbtxt input, as Triton honours it: a request may
leave the input out (it is then simply absent for the model), on every entry.

Served: a decoupled ``mock_llm`` as Triton's generate tests use it
(tests/e2e/triton_generate_models: PROMPT and STREAM required, input_ids optional),
and an echo model with one required and one optional input; with 1 and 3 protocol
processes. Missing required inputs are answered with Triton's words.
"""

from __future__ import annotations

import asyncio
import json
import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio
import tritonclient.http as triton_http
import tritonclient.http.aio as triton_http_aio
from tritonclient.utils import InferenceServerException

from tests.support.models import add_triton_model
from tests.support.serverproc import ServerProcess, start_server

MOCK_LLM = Path(__file__).parent / "triton_generate_models" / "mock_llm"
ECHO_PBTXT = """
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 2 ] optional: true }
]
"""


@pytest.fixture(scope="module", params=[1, 3], ids=["1-protocol-process", "3-protocol-processes"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("optional-inputs")
    shutil.copytree(MOCK_LLM, repository / "mock_llm")
    add_triton_model(repository, "optional_echo", ECHO_PBTXT)
    with start_server(repository, {"protocol_processes": request.param}) as process:
        yield process


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def test_generate_without_the_optional_input(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as rest:
        once = rest.post("/v2/models/mock_llm/generate", json={"PROMPT": "hello", "STREAM": False})
        body = {"PROMPT": ["hello world"], "STREAM": True, "REPETITION": 3}
        streamed = rest.post("/v2/models/mock_llm/generate_stream", json=body)
    assert once.status_code == 200, once.text
    assert once.json()["TEXT"] == "hello"
    assert streamed.status_code == 200, streamed.text
    assert [event["TEXT"] for event in _events(streamed.text)] == ["hello world"] * 3


@pytest.mark.parametrize(
    ("body", "given", "missing"),
    [
        ({}, "[]", "['PROMPT','STREAM']"),
        ({"abc": 123}, "[]", "['PROMPT','STREAM']"),
        ({"PROMPT": "hello"}, "['PROMPT']", "['STREAM']"),
        ({"STREAM": False, "other": "param"}, "['STREAM']", "['PROMPT']"),
    ],
)
def test_generate_names_the_missing_required_inputs_in_tritons_words(
    server: ServerProcess, body: dict[str, Any], given: str, missing: str
) -> None:
    expected = (
        f"expected number of inputs between 2 and 3 but got {given.count(',') + (given != '[]')} "
        f"inputs for model 'mock_llm'. Got input(s) {given}, but missing required input(s) "
        f"{missing}. Please provide all required input(s)."
    )
    with httpx.Client(base_url=server.url, timeout=30) as rest:
        for route in ("generate", "generate_stream"):
            response = rest.post(f"/v2/models/mock_llm/{route}", json=body)
            assert response.status_code == 400, response.text
            assert expected in response.json()["error"]


def _echo_inputs(module: Any, names: list[str]) -> list[Any]:
    tensors = []
    for name in names:
        tensor = module.InferInput(name, [2], "FP32")
        tensor.set_data_from_numpy(np.array([1.0, 2.0], dtype=np.float32))
        tensors.append(tensor)
    return tensors


def _echoed(result: Any) -> list[str]:
    """The output names of a tritonclient result, HTTP (a dict) or gRPC (a message)."""
    response = result.get_response()
    outputs = response["outputs"] if isinstance(response, dict) else response.outputs
    return sorted(o["name"] if isinstance(o, dict) else o.name for o in outputs)


def test_tritonclient_sync_and_aio_may_leave_the_optional_input_out(
    server: ServerProcess,
) -> None:
    http = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    grpc = triton_grpc.InferenceServerClient(server.grpc_address)
    try:
        for client, module in ((http, triton_http), (grpc, triton_grpc)):
            alone = client.infer("optional_echo", _echo_inputs(module, ["INPUT0"]))
            both = client.infer("optional_echo", _echo_inputs(module, ["INPUT0", "INPUT1"]))
            assert _echoed(alone) == ["INPUT0"] and _echoed(both) == ["INPUT0", "INPUT1"]
            with pytest.raises(InferenceServerException) as refused:
                client.infer("optional_echo", _echo_inputs(module, ["INPUT1"]))
            assert "missing required input(s) ['INPUT0']" in refused.value.message()
            assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    finally:
        http.close()
        grpc.close()

    async def run() -> list[list[str]]:
        http_aio = triton_http_aio.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        grpc_aio = triton_grpc_aio.InferenceServerClient(server.grpc_address)
        try:
            results = [
                await http_aio.infer("optional_echo", _echo_inputs(triton_http, ["INPUT0"])),
                await grpc_aio.infer("optional_echo", _echo_inputs(triton_grpc, ["INPUT0"])),
            ]
        finally:
            await http_aio.close()
            await grpc_aio.close()
        return [_echoed(result) for result in results]

    assert asyncio.run(run()) == [["INPUT0"], ["INPUT0"]]


def test_a_grpc_stream_to_the_decoupled_model_without_the_optional_input(
    server: ServerProcess,
) -> None:
    prompt = triton_grpc.InferInput("PROMPT", [1, 1], "BYTES")
    prompt.set_data_from_numpy(np.array([[b"hi"]], dtype=object))
    stream = triton_grpc.InferInput("STREAM", [1, 1], "BOOL")
    stream.set_data_from_numpy(np.array([[True]]))
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer("mock_llm", [prompt, stream], parameters={"REPETITION": 2})
        texts = []
        for _ in range(2):
            result, error = answers.get(timeout=30)
            assert error is None, str(error)
            texts.append(result.as_numpy("TEXT").tolist())
        client.stop_stream()
    assert texts == [[[b"hi"]], [[b"hi"]]]
