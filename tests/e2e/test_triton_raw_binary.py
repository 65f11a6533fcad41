"""Raw binary requests (Triton's ``Inference-Header-Content-Length: 0``).

The body is the raw little-endian bytes of the model's one declared input; its
shape comes from the declaration (Triton's rules: a batching model's batch
dimension is 1, one other ``-1`` is deduced from the byte count, more than one is
ambiguous), and the outputs come back as binary tensor data. A BYTES input
declared ``[1]`` takes the whole body as its one element (a raw image to a Python
model). Bodies that do not fit, ambiguous shapes, other BYTES shapes and models
with several (or no) declared inputs are a clear 400.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server

RAW = {"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"}
VALUES = np.arange(8, dtype=np.float32)


def _input(name: str, datatype: str, shape: list[int]) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape}


@pytest.fixture(scope="module")
def raw_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("raw")
    add_custom_model(repository, "fixed", "Echo", inputs=[_input("x", "FP32", [8])])
    add_custom_model(repository, "rows", "Echo", inputs=[_input("x", "FP32", [-1, 4])])
    add_custom_model(repository, "words", "Echo", inputs=[_input("w", "BYTES", [1])])
    add_custom_model(repository, "pair", "Echo", inputs=[_input("w", "BYTES", [2])])
    add_custom_model(repository, "grid", "Echo", inputs=[_input("x", "FP32", [-1, -1])])
    batching = {"max_batch_size": 4}
    add_custom_model(
        repository, "batch", "Echo", inputs=[_input("x", "FP32", [-1, -1])], **batching
    )
    add_custom_model(
        repository, "batch_words", "Echo", inputs=[_input("w", "BYTES", [-1, 1])], **batching
    )
    two = [_input("a", "FP32", [4]), _input("b", "FP32", [4])]
    add_custom_model(repository, "two", "Echo", inputs=two)
    add_custom_model(repository, "undeclared", "Echo")
    with start_server(repository) as process:
        yield process


def outputs(response: httpx.Response) -> dict[str, np.ndarray]:
    """Each output of a binary answer, decoded from the raw tail."""
    assert response.status_code == 200, response.text
    length = int(response.headers["Inference-Header-Content-Length"])
    header = json.loads(response.content[:length])
    offset, arrays = length, {}
    for output in header["outputs"]:
        size = output["parameters"]["binary_data_size"]
        raw = response.content[offset : offset + size]
        arrays[output["name"]] = np.frombuffer(raw, np.float32).reshape(output["shape"])
        offset += size
    return arrays


@pytest.fixture
def rest(raw_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=raw_server.url, timeout=30) as client:
        yield client


def test_the_body_is_the_one_input_shaped_as_declared(rest: httpx.Client) -> None:
    fixed = outputs(rest.post("/v2/models/fixed/infer", content=VALUES.tobytes(), headers=RAW))
    np.testing.assert_array_equal(fixed["x"], VALUES)
    rows = outputs(rest.post("/v2/models/rows/infer", content=VALUES.tobytes(), headers=RAW))
    np.testing.assert_array_equal(rows["x"], VALUES.reshape(2, 4))


def test_a_batching_models_batch_dimension_is_one(rest: httpx.Client) -> None:
    batch = outputs(rest.post("/v2/models/batch/infer", content=VALUES.tobytes(), headers=RAW))
    np.testing.assert_array_equal(batch["x"], VALUES.reshape(1, 8))


@pytest.mark.parametrize(("model", "shape"), [("words", [1]), ("batch_words", [1, 1])])
def test_a_bytes_input_of_one_element_takes_the_whole_body(
    rest: httpx.Client, model: str, shape: list[int]
) -> None:
    """A raw image to a Python model: the body is the one element, whatever its bytes."""
    image = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    response = rest.post(f"/v2/models/{model}/infer", content=image, headers=RAW)
    assert response.status_code == 200, response.text
    length = int(response.headers["Inference-Header-Content-Length"])
    (output,) = json.loads(response.content[:length])["outputs"]
    assert (output["datatype"], output["shape"]) == ("BYTES", shape)
    assert response.content[length:] == struct.pack("<I", len(image)) + image


def test_chunked_and_compressed_bodies(rest: httpx.Client) -> None:
    raw = VALUES.tobytes()

    def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
        yield raw[:5]
        yield raw[5:]

    chunked = rest.post("/v2/models/fixed/infer", content=chunks(), headers=RAW)
    np.testing.assert_array_equal(outputs(chunked)["x"], VALUES)
    zipped = rest.post(
        "/v2/models/fixed/infer",
        content=gzip.compress(raw),
        headers=RAW | {"Content-Encoding": "gzip"},
    )
    np.testing.assert_array_equal(outputs(zipped)["x"], VALUES)


def test_from_an_async_client(raw_server: ServerProcess) -> None:
    async def run() -> httpx.Response:
        async with httpx.AsyncClient(base_url=raw_server.url, timeout=30) as client:
            return await client.post("/v2/models/rows/infer", content=VALUES.tobytes(), headers=RAW)

    np.testing.assert_array_equal(outputs(asyncio.run(run()))["x"], VALUES.reshape(2, 4))


@pytest.mark.parametrize(
    ("model", "body", "fragment"),
    [
        (
            "fixed",
            np.arange(9, dtype=np.float32).tobytes(),
            "9 value(s) do not fit its declared shape [8]",
        ),
        ("fixed", b"\0" * 33, "33 bytes is not a whole number of FP32 elements"),
        ("rows", b"\0" * 12, "3 value(s) do not fit its declared shape [-1, 4]"),
        (
            "pair",
            b"abc",
            "For BYTE datatype raw input 'w', the model must have input shape [1]",
        ),
        (
            "grid",
            VALUES.tobytes(),
            "The shape of the raw input 'x' can not be deduced because there are more "
            "than one variable-sized dimension",
        ),
        ("two", VALUES.tobytes(), "model 'two' declares 'a', 'b'"),
        ("undeclared", VALUES.tobytes(), "model 'undeclared' declares none"),
    ],
)
def test_what_a_raw_body_cannot_be_is_a_clear_400(
    rest: httpx.Client, model: str, body: bytes, fragment: str
) -> None:
    response = rest.post(f"/v2/models/{model}/infer", content=body, headers=RAW)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]


def test_a_body_labelled_json_is_refused(rest: httpx.Client) -> None:
    """A JSON request whose header length was mistaken for 0, not tensor bytes."""
    body = json.dumps({"inputs": []}).encode()
    headers = RAW | {"Content-Type": "application/json"}
    response = rest.post("/v2/models/fixed/infer", content=body, headers=headers)
    assert response.status_code == 400
    assert "its Content-Type is application/json" in response.json()["error"]


def test_an_unknown_model_is_404(rest: httpx.Client) -> None:
    response = rest.post("/v2/models/nope/infer", content=VALUES.tobytes(), headers=RAW)
    assert response.status_code == 404
