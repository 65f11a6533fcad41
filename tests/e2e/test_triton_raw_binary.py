"""Raw binary requests (Triton's ``Inference-Header-Content-Length: 0``).

The body is the raw little-endian bytes of the model's one declared input; its
shape comes from the declaration (``-1`` deduced from the byte count), and the
outputs come back as binary tensor data. BYTES inputs, bodies that do not fit and
models with several (or no) declared inputs are a clear 400.
"""

from __future__ import annotations

import asyncio
import gzip
import json
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
        ("words", b"abc", "Input 'w' is BYTES, which a raw binary request cannot carry"),
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
