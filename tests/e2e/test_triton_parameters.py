"""Triton's front-end parameters are the edge's: the model sees only the user's.

tritonclient.http adds ``binary_data_output`` to a request that names no output,
``binary_data`` to each output it names and ``binary_data_size`` to each binary
input; none of them reaches a runtime reading ``request.parameters``, over REST
(tritonclient sync and aio, raw HTTP) and gRPC (tritonclient sync and aio).
"""

from __future__ import annotations

import asyncio
import json
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

from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess, start_server

X = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
USER = {"key1": "value", "k2": 7}


@pytest.fixture(scope="module")
def reflecting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("reflect")
    add_custom_model(repository, "reflect", "Reflect")
    with start_server(repository) as process:
        yield process


def seen(result: Any) -> dict[str, Any]:
    raw = result.as_numpy("seen").reshape(-1)[0]
    return dict(json.loads(raw))


def _inputs(module: Any, binary: bool | None = None) -> list[Any]:
    tensor = module.InferInput("x", list(X.shape), "FP32")
    if binary is None:
        tensor.set_data_from_numpy(X)
    else:
        tensor.set_data_from_numpy(X, binary_data=binary)
    return [tensor]


EXPECTED_NO_OUTPUTS = {"request": USER, "inputs": {"x": {}}, "outputs": {}}
EXPECTED_NAMED = {
    "request": USER,
    "inputs": {"x": {}},
    "outputs": {"seen": {}, "x": {}},
}


@pytest.mark.parametrize("binary", [True, False])
def test_tritonclient_http(reflecting: ServerProcess, binary: bool) -> None:
    client = tritonclient.http.InferenceServerClient(f"127.0.0.1:{reflecting.http_port}")
    try:
        result = client.infer("reflect", _inputs(tritonclient.http, binary), parameters=USER)
        assert seen(result) == EXPECTED_NO_OUTPUTS
        outputs = [
            tritonclient.http.InferRequestedOutput("seen", binary_data=binary),
            tritonclient.http.InferRequestedOutput("x", binary_data=not binary),
        ]
        result = client.infer(
            "reflect", _inputs(tritonclient.http, binary), outputs=outputs, parameters=USER
        )
        assert seen(result) == EXPECTED_NAMED
        np.testing.assert_array_equal(result.as_numpy("x"), X)
    finally:
        client.close()


def test_tritonclient_http_aio(reflecting: ServerProcess) -> None:
    async def run() -> dict[str, Any]:
        async with tritonclient.http.aio.InferenceServerClient(
            f"127.0.0.1:{reflecting.http_port}"
        ) as client:
            result = await client.infer("reflect", _inputs(tritonclient.http), parameters=USER)
            return seen(result)

    assert asyncio.run(run()) == EXPECTED_NO_OUTPUTS


def test_tritonclient_grpc_sync_and_aio(reflecting: ServerProcess) -> None:
    with tritonclient.grpc.InferenceServerClient(reflecting.grpc_address) as client:
        outputs = [tritonclient.grpc.InferRequestedOutput(n) for n in ("seen", "x")]
        result = client.infer(
            "reflect", _inputs(tritonclient.grpc), outputs=outputs, parameters=USER
        )
        assert seen(result) == EXPECTED_NAMED

    async def run() -> dict[str, Any]:
        async with tritonclient.grpc.aio.InferenceServerClient(reflecting.grpc_address) as client:
            result = await client.infer("reflect", _inputs(tritonclient.grpc), parameters=USER)
            return seen(result)

    assert asyncio.run(run()) == EXPECTED_NO_OUTPUTS


def test_raw_http_binary_and_json(reflecting: ServerProcess) -> None:
    raw = X.tobytes()
    header = {
        "parameters": {"binary_data_output": False, **USER},
        "inputs": [
            {
                "name": "x",
                "datatype": "FP32",
                "shape": [1, 3],
                "parameters": {"binary_data_size": len(raw), "content_type": "np"},
            }
        ],
        "outputs": [{"name": "seen", "parameters": {"binary_data": False, "mine": 1}}],
    }
    head = json.dumps(header).encode()
    with httpx.Client(base_url=reflecting.url, timeout=30) as rest:
        response = rest.post(
            "/v2/models/reflect/infer",
            content=head + raw,
            headers={"Inference-Header-Content-Length": str(len(head))},
        )
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    assert json.loads(output["data"][0]) == {
        "request": USER,
        "inputs": {"x": {"content_type": "np"}},
        "outputs": {"seen": {"mine": 1}},
    }
