"""What a runtime returns reaches the client intact, or as a 500 that names the
mistake, the same with the model in the main process and in a worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http

from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server

ODD = "/v2/models/odd/infer"


def request(kind: str, binary: bool) -> dict[str, Any]:
    return {
        "inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}],
        "parameters": {"kind": kind, "binary_data_output": binary},
    }


@pytest.fixture(scope="module", params=[0, 1], ids=["in-process", "worker"])
def odd_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("odd")
    add_custom_model(repository, "odd", "OddOutputs")
    with start_server(repository, settings={"parallel_workers": request.param}) as process:
        yield process


def post(server: ServerProcess, kind: str, binary: bool = False) -> Any:
    return httpx.post(server.url + ODD, json=request(kind, binary), timeout=30)


def test_numpy_text_is_sent_as_utf8_bytes(odd_server: ServerProcess) -> None:
    answer = post(odd_server, "text")
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0] == {
        "name": "y", "datatype": "BYTES", "shape": [2], "data": ["h\u00e9llo", "x"]
    }  # fmt: skip
    with tritonclient.http.InferenceServerClient(f"127.0.0.1:{odd_server.http_port}") as client:
        tensor = tritonclient.http.InferInput("x", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
        result = client.infer("odd", [tensor], parameters={"kind": "text"})
    assert result.as_numpy("y").tolist() == ["h\u00e9llo".encode(), b"x"]


def test_big_endian_arrays_are_sent_little_endian(odd_server: ServerProcess) -> None:
    assert post(odd_server, "big-endian").json()["outputs"][0]["data"] == [0, 1, 2]
    binary = post(odd_server, "big-endian", binary=True)
    assert binary.status_code == 200
    assert binary.content.endswith(np.arange(3, dtype="<i4").tobytes())


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("complex", "Model 'odd': output 'y': numpy dtype complex128 has no Open Inference"),
        ("none", "Model 'odd': predict returned NoneType, not an InferenceResponse"),
    ],
)
def test_what_cannot_be_sent_is_a_500_naming_the_mistake(
    odd_server: ServerProcess, kind: str, message: str
) -> None:
    answer = post(odd_server, kind)
    assert answer.status_code == 500
    assert answer.json()["error"].startswith(message)
