"""A Triton model's declared inputs are enforced before it is called, on every
protocol and entry; a model-settings.json's are not (MLServer's metadata).

A model whose config.pbtxt declares inputs gets only requests that carry exactly
those, each of its datatype and of a shape that fits (``-1``: any size); anything
else is a 400 / INVALID_ARGUMENT naming the input: tritonclient over HTTP and gRPC
(sync and aio), raw HTTP on /infer, /infer_stream, /generate and /generate_stream,
and gRPC ModelStreamInfer. The same inputs declared in a model-settings.json are
metadata and codec hints, as in MLServer: what the request sends reaches the runtime.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.grpc.aio
import tritonclient.http
import tritonclient.http.aio
from tritonclient.utils import InferenceServerException

from tests.support.models import add_custom_model, add_triton_model
from tests.support.serverproc import ServerProcess, start_server

DECLARED = [
    {"name": "INPUT0", "datatype": "FP32", "shape": [16]},
    {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 2]},
    {"name": "INPUT2", "datatype": "BYTES", "shape": [1]},
]
GOOD = {
    "INPUT0": np.zeros(16, np.float32),
    "INPUT1": np.ones((3, 2), np.int32),
    "INPUT2": np.array([b"x"], dtype=object),
}
# What is wrong -> the inputs sent and a fragment of the error.
COUNT = "expected 3 inputs but got {} inputs for model 'declared'. Got input(s) "
BAD: dict[str, tuple[dict[str, np.ndarray], str]] = {
    "none": (
        {},
        COUNT.format(0) + "[], but missing required input(s) ['INPUT0','INPUT1','INPUT2']. "
        "Please provide all required input(s).",
    ),
    "missing": (
        {k: v for k, v in GOOD.items() if k != "INPUT1"},
        COUNT.format(2) + "['INPUT0','INPUT2'], but missing required input(s) ['INPUT1']",
    ),
    "unknown": (
        GOOD | {"INPUT9": np.zeros(1, np.float32)},
        COUNT.format(4) + "['INPUT0','INPUT1','INPUT2','INPUT9'], but missing required "
        "input(s) []. Please provide all required input(s). Not inputs of the model: ['INPUT9']",
    ),
    "renamed": (
        {"INPUT0": GOOD["INPUT0"], "INPUT1": GOOD["INPUT1"], "INPUT9": GOOD["INPUT2"]},
        "unexpected inference input 'INPUT9' for model 'declared'",
    ),
    "datatype": (
        GOOD | {"INPUT0": np.zeros(16, np.float64)},
        "inference input 'INPUT0' data-type is 'FP64', but model 'declared' expects 'FP32'",
    ),
    "shape": (
        GOOD | {"INPUT0": np.zeros((1, 4), np.float32)},
        "unexpected shape for input 'INPUT0' for model 'declared'. Expected [16], got [1,4]",
    ),
    "fixed dim": (
        GOOD | {"INPUT1": np.ones((3, 3), np.int32)},
        "unexpected shape for input 'INPUT1' for model 'declared'. Expected [-1,2], got [3,3]",
    ),
}
DATATYPE = {np.float32: "FP32", np.float64: "FP64", np.int32: "INT32", np.object_: "BYTES"}


DECLARED_PBTXT = """
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ -1, 2 ] },
  { name: "INPUT2" data_type: TYPE_STRING dims: [ 1 ] }
]
"""
BATCHED_PBTXT = """
max_batch_size: 4
dynamic_batching { max_queue_delay_microseconds: 1000 }
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""
LLM_PBTXT = 'input [ { name: "PROMPT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'


@pytest.fixture(scope="module")
def declaring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("declared")
    add_triton_model(repository, "declared", DECLARED_PBTXT)
    add_triton_model(repository, "batched", BATCHED_PBTXT)
    add_triton_model(repository, "llm", LLM_PBTXT)
    add_custom_model(repository, "free_llm", "Tokens")
    add_custom_model(repository, "settings_declared", "Echo", inputs=DECLARED)
    with start_server(repository) as process:
        yield process


def _inputs(module: Any, arrays: dict[str, np.ndarray]) -> list[Any]:
    tensors = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), DATATYPE[array.dtype.type])
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def _json_inputs(arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "datatype": DATATYPE[array.dtype.type],
            "shape": list(array.shape),
            "data": [v.decode() if isinstance(v, bytes) else v for v in array.ravel().tolist()],
        }
        for name, array in arrays.items()
    ]


def test_a_request_that_fits_is_served(declaring: ServerProcess) -> None:
    client = tritonclient.http.InferenceServerClient(f"127.0.0.1:{declaring.http_port}")
    try:
        result = client.infer("declared", _inputs(tritonclient.http, GOOD))
        np.testing.assert_array_equal(result.as_numpy("INPUT1"), GOOD["INPUT1"])
        rows = np.ones((2, 3), np.float32)
        batched = client.infer("batched", _inputs(tritonclient.http, {"x": rows}))
        np.testing.assert_array_equal(batched.as_numpy("x"), rows)
    finally:
        client.close()


@pytest.mark.parametrize("case", list(BAD))
def test_tritonclient_http_sync_and_aio(declaring: ServerProcess, case: str) -> None:
    arrays, fragment = BAD[case]
    client = tritonclient.http.InferenceServerClient(f"127.0.0.1:{declaring.http_port}")
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.infer("declared", _inputs(tritonclient.http, arrays))
    finally:
        client.close()
    assert refused.value.status() == "400" and fragment in refused.value.message()

    async def run() -> InferenceServerException:
        async with tritonclient.http.aio.InferenceServerClient(
            f"127.0.0.1:{declaring.http_port}"
        ) as aio:
            with pytest.raises(InferenceServerException) as refused:
                await aio.infer("declared", _inputs(tritonclient.http, arrays))
            return refused.value

    assert fragment in asyncio.run(run()).message()


@pytest.mark.parametrize("case", list(BAD))
def test_tritonclient_grpc_sync_and_aio(declaring: ServerProcess, case: str) -> None:
    arrays, fragment = BAD[case]
    with (
        tritonclient.grpc.InferenceServerClient(declaring.grpc_address) as client,
        pytest.raises(InferenceServerException) as refused,
    ):
        client.infer("declared", _inputs(tritonclient.grpc, arrays))
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert fragment in refused.value.message()

    async def run() -> InferenceServerException:
        async with tritonclient.grpc.aio.InferenceServerClient(declaring.grpc_address) as aio:
            with pytest.raises(InferenceServerException) as refused:
                await aio.infer("declared", _inputs(tritonclient.grpc, arrays))
            return refused.value

    assert fragment in asyncio.run(run()).message()


def test_grpc_stream_answers_the_error_in_the_stream(declaring: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    with tritonclient.grpc.InferenceServerClient(declaring.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer("llm", _inputs(tritonclient.grpc, {}))
        result, error = answers.get(timeout=30)
        client.stop_stream()
    assert result is None and "missing required input(s) ['PROMPT']" in error.message()


def test_model_settings_inputs_are_metadata_as_in_mlserver(declaring: ServerProcess) -> None:
    """The same inputs in a model-settings.json refuse nothing: an input it does not
    declare, another datatype or shape, one missing all reach the runtime."""
    with httpx.Client(base_url=declaring.url, timeout=30) as rest:
        for case in ("unknown", "renamed", "datatype", "shape", "missing"):
            body = {"inputs": _json_inputs(BAD[case][0])}
            response = rest.post("/v2/models/settings_declared/infer", json=body)
            assert response.status_code == 200, (case, response.text)
            names = [output["name"] for output in response.json()["outputs"]]
            assert names == list(BAD[case][0]), case


@pytest.mark.parametrize("route", ["infer", "infer_stream", "generate", "generate_stream"])
def test_raw_http_on_every_route(declaring: ServerProcess, route: str) -> None:
    body = {"inputs": _json_inputs(BAD["shape"][0])}
    with httpx.Client(base_url=declaring.url, timeout=30) as rest:
        response = rest.post(f"/v2/models/declared/{route}", json=body)
    assert response.status_code == 400, response.text
    assert BAD["shape"][1] in response.json()["error"]


def test_batch_dimension_is_any_size_but_the_rest_is_declared(declaring: ServerProcess) -> None:
    with httpx.Client(base_url=declaring.url, timeout=30) as rest:
        tensor = {"name": "x", "datatype": "FP32", "shape": [2, 4], "data": [0.0] * 8}
        response = rest.post("/v2/models/batched/infer", json={"inputs": [tensor]})
    assert response.status_code == 400
    expected = "unexpected shape for input 'x' for model 'batched'. Expected [-1,3], got [2,4]"
    assert expected in response.text


@pytest.mark.parametrize(
    ("model", "route"),
    [
        ("llm", "generate"),
        ("llm", "generate_stream"),
        ("free_llm", "generate"),
        ("free_llm", "generate_stream"),
    ],
)
def test_an_empty_generate_body_is_400(declaring: ServerProcess, model: str, route: str) -> None:
    with httpx.Client(base_url=declaring.url, timeout=30) as rest:
        response = rest.post(f"/v2/models/{model}/{route}", json={})
    assert response.status_code == 400, response.text
    expected = (
        "expected 1 inputs but got 0 inputs for model 'llm'"
        if model == "llm"
        else "gives no inputs"
    )
    assert expected in response.text
