"""Triton's classification extension over REST and gRPC, with tritonclient and raw HTTP.

An output asked for with ``classification: k`` comes back as its k largest values,
BYTES "value:index[:label]", largest first; labels from the file a declared output
names with ``label_filename``; per batch row for a model that batches.
"""

from __future__ import annotations

import asyncio
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

LABELS = ["cat", "dog", "owl", "yak"]
SCORES = np.array([[0.1, 0.7, 0.2, 0.5, 0.05, 0.9]], dtype=np.float32)
TOP3 = [b"0.900000:5", b"0.700000:1:dog", b"0.500000:3:yak"]  # labels stop at index 3


# Triton's image models as image_client.py reads them: a batch dimension without
# dynamic_batching, the input's format, the output's labels (all in config.pbtxt).
IMAGE_PBTXT = """max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 6 ] } ]
output [ { name: "x" data_type: TYPE_FP32 dims: [ 6 ] label_filename: "labels.txt" } ]
"""


def _declared(shape: list[int]) -> dict[str, Any]:
    output = {"name": "x", "datatype": "FP32", "shape": shape}
    labelled = output | {"parameters": {"label_filename": "labels.txt"}}
    return {"inputs": [output], "outputs": [labelled]}


@pytest.fixture(scope="module")
def classifying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("classification")
    for name, extra in (("scores", {}), ("batched", {"max_batch_size": 4})):
        folder = add_custom_model(repository, name, "Echo", **_declared([-1, 6]), **extra)
        (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    add_custom_model(repository, "plain", "Echo")
    folder = add_triton_model(repository, "image", IMAGE_PBTXT)  # echoes x
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    with start_server(repository) as process:
        yield process


def _inputs(module: Any, scores: np.ndarray = SCORES) -> list[Any]:
    tensor = module.InferInput("x", list(scores.shape), "FP32")
    tensor.set_data_from_numpy(scores)
    return [tensor]


def test_tritonclient_http_sync_and_aio(classifying: ServerProcess) -> None:
    url = f"127.0.0.1:{classifying.http_port}"
    client = tritonclient.http.InferenceServerClient(url)
    try:
        for binary in (True, False):
            outputs = [tritonclient.http.InferRequestedOutput("x", binary, class_count=3)]
            result = client.infer("scores", _inputs(tritonclient.http), outputs=outputs)
            # JSON BYTES come back as str, binary as bytes (as from Triton)
            got = [v if isinstance(v, bytes) else v.encode() for v in result.as_numpy("x")]
            assert got == TOP3
    finally:
        client.close()

    async def run() -> list[bytes]:
        async with tritonclient.http.aio.InferenceServerClient(url) as aio:
            outputs = [tritonclient.http.InferRequestedOutput("x", class_count=3)]
            result = await aio.infer("scores", _inputs(tritonclient.http), outputs=outputs)
            return list(result.as_numpy("x").tolist())

    assert asyncio.run(run()) == TOP3


def test_tritonclient_grpc_sync_and_aio(classifying: ServerProcess) -> None:
    with tritonclient.grpc.InferenceServerClient(classifying.grpc_address) as client:
        outputs = [tritonclient.grpc.InferRequestedOutput("x", class_count=3)]
        result = client.infer("scores", _inputs(tritonclient.grpc), outputs=outputs)
        assert result.as_numpy("x").tolist() == TOP3

    async def run() -> list[bytes]:
        async with tritonclient.grpc.aio.InferenceServerClient(classifying.grpc_address) as aio:
            outputs = [tritonclient.grpc.InferRequestedOutput("x", class_count=3)]
            result = await aio.infer("scores", _inputs(tritonclient.grpc), outputs=outputs)
            return list(result.as_numpy("x").tolist())

    assert asyncio.run(run()) == TOP3


def test_a_batching_model_is_classified_per_row(classifying: ServerProcess) -> None:
    rows = np.concatenate([SCORES, SCORES[:, ::-1]])
    with tritonclient.grpc.InferenceServerClient(classifying.grpc_address) as client:
        outputs = [tritonclient.grpc.InferRequestedOutput("x", class_count=2)]
        result = client.infer("batched", _inputs(tritonclient.grpc, rows), outputs=outputs)
    assert result.as_numpy("x").tolist() == [
        [b"0.900000:5", b"0.700000:1:dog"],
        [b"0.900000:0:cat", b"0.700000:4"],
    ]


def test_raw_http_json_and_the_count_capped(classifying: ServerProcess) -> None:
    body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 6], "data": SCORES[0].tolist()}],
        "outputs": [{"name": "x", "parameters": {"classification": 10}}],
    }
    with httpx.Client(base_url=classifying.url, timeout=30) as rest:
        response = rest.post("/v2/models/scores/infer", json=body)
        stream = rest.post("/v2/models/scores/infer_stream", json=body)
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    assert (output["datatype"], output["shape"]) == ("BYTES", [6])
    assert output["data"][:2] == ["0.900000:5", "0.700000:1:dog"]
    assert output["data"][-1] == "0.050000:4"
    assert '"0.900000:5"' in stream.text  # the event stream classifies too


@pytest.mark.parametrize("count", [0, -1, "3", 1.5])
def test_a_count_that_is_not_a_positive_integer_is_400(
    classifying: ServerProcess, count: Any
) -> None:
    body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 6], "data": SCORES[0].tolist()}],
        "outputs": [{"name": "x", "parameters": {"classification": count}}],
    }
    with httpx.Client(base_url=classifying.url, timeout=30) as rest:
        response = rest.post("/v2/models/scores/infer", json=body)
    assert response.status_code == 400
    assert "parameter 'classification' must be an integer >= 1" in response.text


def test_outputs_that_have_no_order_are_refused_on_both_protocols(
    classifying: ServerProcess,
) -> None:
    words = np.array([b"a", b"b"], dtype=object)
    with tritonclient.grpc.InferenceServerClient(classifying.grpc_address) as client:
        tensor = tritonclient.grpc.InferInput("w", [2], "BYTES")
        tensor.set_data_from_numpy(words)
        outputs = [tritonclient.grpc.InferRequestedOutput("w", class_count=1)]
        with pytest.raises(InferenceServerException) as refused:
            client.infer("plain", [tensor], outputs=outputs)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unsupported type 'BYTES'" in refused.value.message()
    body = {
        "inputs": [{"name": "w", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]}],
        "outputs": [{"name": "w", "parameters": {"classification": 1}}],
    }
    with httpx.Client(base_url=classifying.url, timeout=30) as rest:
        response = rest.post("/v2/models/plain/infer", json=body)
    assert response.status_code == 400 and "unsupported type 'BYTES'" in response.text


def test_an_output_row_over_a_million_elements_is_not_classified(
    classifying: ServerProcess,
) -> None:
    """Triton's bound (classification.cc): a row of more than 1,000,000 elements is
    400 / INVALID_ARGUMENT, not sorted; a count beyond a row's elements is capped."""
    big = np.zeros(1_000_001, dtype=np.float32)
    with tritonclient.grpc.InferenceServerClient(classifying.grpc_address) as client:
        outputs = [tritonclient.grpc.InferRequestedOutput("x", class_count=1)]
        with pytest.raises(InferenceServerException) as refused:
            client.infer("plain", _inputs(tritonclient.grpc, big), outputs=outputs)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "classification output tensor too large" in refused.value.message()
    with tritonclient.http.InferenceServerClient(f"127.0.0.1:{classifying.http_port}") as client:
        outputs = [tritonclient.http.InferRequestedOutput("x", class_count=1)]
        with pytest.raises(InferenceServerException) as refused:
            client.infer("plain", _inputs(tritonclient.http, big), outputs=outputs)
        assert refused.value.status() == "400"
        assert "classification output tensor too large" in refused.value.message()
        # At the bound it is classified.
        outputs = [tritonclient.http.InferRequestedOutput("x", class_count=1)]
        result = client.infer("plain", _inputs(tritonclient.http, big[:-1]), outputs=outputs)
        assert result.as_numpy("x").tolist() == [b"0.000000:0"]


def test_a_triton_folder_as_tritons_image_client_reads_it(classifying: ServerProcess) -> None:
    """Over gRPC the config carries the input's format and the output's labels (they
    were dropped: image_client.py refused FORMAT_NONE); the classes come per batch
    row, labelled from config.pbtxt's label_filename (they came as [k], unlabelled)."""
    with tritonclient.grpc.InferenceServerClient(classifying.grpc_address) as client:
        config = client.get_model_config("image").config
        assert config.input[0].format == config.input[0].FORMAT_NHWC
        assert config.output[0].label_filename == "labels.txt"
        outputs = [tritonclient.grpc.InferRequestedOutput("x", class_count=3)]
        result = client.infer("image", _inputs(tritonclient.grpc), outputs=outputs)
    assert result.as_numpy("x").tolist() == [TOP3]
