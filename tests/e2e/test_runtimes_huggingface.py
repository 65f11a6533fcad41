"""A transformers pipeline on a real server, from files on disk, without the Hub."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton

from tests.frameworks import require_module, save_tiny_text_classifier
from tests.support.models import write_model_folder
from tests.support.serverproc import ServerProcess, start_server

from .runtime_models import grpc_infer, metadata_tensors, rest_infer

transformers = require_module("transformers", "huggingface")

TEXTS = ["the movie was good", "awful plot", "very very not great acting", "the film"]


@pytest.fixture(scope="module")
def fake_hub() -> Iterator[socket.socket]:
    """A listening socket standing in for the Hub: no connection may reach it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        yield listener


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("huggingface")
    folder = repository / "sentiment"
    save_tiny_text_classifier(folder)
    return write_model_folder(
        repository,
        "sentiment",
        "mlserver_huggingface.HuggingFaceRuntime",
        max_batch_size=4,
        max_batch_time=0.01,
        parameters={"extra": {"task": "text-classification"}},
    )


@pytest.fixture(scope="module")
def hf_server(model_folder: Path, fake_hub: socket.socket) -> Iterator[ServerProcess]:
    port = fake_hub.getsockname()[1]
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HUB_OFFLINE": "0"}
    with start_server(model_folder.parent, env=env) as process:
        yield process


@pytest.fixture(scope="module")
def rest(hf_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hf_server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def reference(model_folder: Path) -> Any:
    """The same pipeline, called directly."""
    return transformers.pipeline("text-classification", model=str(model_folder))


def results(documents: np.ndarray) -> list[Any]:
    assert documents.shape == (len(documents), 1)
    return [json.loads(item) for item in documents[:, 0]]


def assert_same(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [row["label"] for row in actual] == [row["label"] for row in expected]
    np.testing.assert_allclose(
        [row["score"] for row in actual], [row["score"] for row in expected], rtol=1e-5
    )


def texts(*items: str) -> np.ndarray:
    return np.array([item.encode() for item in items], dtype=object)


def test_rest_answers_like_the_pipeline(rest: httpx.Client, reference: Any) -> None:
    response = rest.post(
        "/v2/models/sentiment/infer",
        json={"inputs": [{"name": "args", "shape": [4], "datatype": "BYTES", "data": TEXTS}]},
    )
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("output", "BYTES", [4, 1])
    assert output["parameters"] == {"content_type": "hg_jsonlist"}
    assert_same([json.loads(item) for item in output["data"]], reference(TEXTS))


def test_grpc_answers_like_the_pipeline(hf_server: ServerProcess, reference: Any) -> None:
    with triton.InferenceServerClient(hf_server.grpc_address) as client:
        outputs = grpc_infer(client, "sentiment", {"args": texts(*TEXTS[:2])})
    assert_same(results(outputs["output"]), reference(TEXTS[:2]))


def test_keyword_inputs(rest: httpx.Client, reference: Any) -> None:
    outputs = rest_infer(rest, "sentiment", {"args": texts(TEXTS[0]), "top_k": np.array([2])})
    (row,) = [json.loads(item) for item in outputs["output"][:, 0]]
    assert_same(row, reference(TEXTS[0], top_k=2))


def test_concurrent_requests_each_get_their_rows(rest: httpx.Client, reference: Any) -> None:
    """max_batch_size 4: requests may run as one batch; each gets its own answers."""
    batches = [TEXTS[i : i + 1 + i % 2] for i in range(len(TEXTS))] * 2

    def call(items: list[str]) -> np.ndarray:
        return rest_infer(rest, "sentiment", {"args": texts(*items)})["output"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(call, batches))
    for items, answer in zip(batches, answers, strict=True):
        assert_same([json.loads(item) for item in answer[:, 0]], reference(items))


def test_metadata(rest: httpx.Client) -> None:
    assert metadata_tensors(rest, "sentiment") == {
        "inputs": [("args", "BYTES", [-1])],
        "outputs": [("output", "BYTES", [-1, 1])],
    }


def test_nothing_contacted_the_hub(rest: httpx.Client, fake_hub: socket.socket) -> None:
    assert rest.get("/v2/models/sentiment/ready").status_code == 200
    with pytest.raises(BlockingIOError):
        fake_hub.accept()
