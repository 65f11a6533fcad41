"""The response cache with an MLServer ``MLModel`` runtime on a real server: its
own routes (``@custom_handler``) are never cached, and request headers (REST
headers, gRPC metadata), which reach such a model, are not part of the key."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from tests.support.models import add_sklearn_model, write_model_folder
from tests.support.serverproc import ServerProcess, start_server

# Answers a fresh random token each time it runs (equal tokens mean one run) and
# sends it back as a header too; a custom route counts its own calls.
MLMODEL_RUNTIME = textwrap.dedent(
    """
    import os

    import numpy as np
    from mlserver import MLModel
    from mlserver.codecs import NumpyRequestCodec
    from mlserver.handlers import custom_handler
    from mlserver.types import InferenceRequest, InferenceResponse


    class TokenModel(MLModel):
        async def load(self) -> bool:
            self.bumps = 0
            return True

        async def predict(self, payload: InferenceRequest) -> InferenceResponse:
            token = int(np.frombuffer(os.urandom(8), dtype=np.int64)[0])
            response = NumpyRequestCodec.encode_response(self.name, np.array([token]))
            response.parameters.headers = {"x-token": str(token)}
            return response

        @custom_handler(rest_path="/counter/bump")
        async def bump(self, payload: dict) -> dict:
            self.bumps += 1
            return {"calls": self.bumps}
    """
)
ROW = {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}


def add_mlmodel(repository: Path, name: str) -> None:
    files = {"models.py": MLMODEL_RUNTIME}
    write_model_folder(repository, name, "models.TokenModel", files=files, cache_enabled=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("cache-routes")
    add_mlmodel(repository, "tokens")
    add_sklearn_model(repository, cache_enabled=True)
    with start_server(repository, {"cache_enabled": True, "cache_size": 20}) as process:
        yield process


def cache_counts(server: ServerProcess, name: str) -> tuple[int, int]:
    stats = httpx.get(f"{server.url}/v2/models/{name}/stats", timeout=10).json()
    inference = stats["model_stats"][0]["inference_stats"]
    return inference["cache_hit"]["count"], inference["cache_miss"]["count"]


def infer(server: ServerProcess, name: str, request_id: str) -> httpx.Response:
    response = httpx.post(
        f"{server.url}/v2/models/{name}/infer",
        json={"inputs": [ROW]},
        headers={"x-request-id": request_id},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response


def first_value(response: httpx.Response) -> Any:
    return response.json()["outputs"][0]["data"][0]


def test_a_custom_route_is_never_cached(server: ServerProcess) -> None:
    answers = [
        httpx.post(f"{server.url}/counter/bump", json={"same": "body"}, timeout=30)
        for _ in range(3)
    ]
    assert [(a.status_code, a.json()) for a in answers] == [
        (200, {"calls": 1}),
        (200, {"calls": 2}),
        (200, {"calls": 3}),
    ]
    assert cache_counts(server, "tokens") == (0, 0)  # not even looked up


@pytest.mark.parametrize("name", ["tokens", "iris"])
def test_requests_differing_only_in_headers_hit_the_cache(server: ServerProcess, name: str) -> None:
    hits, misses = cache_counts(server, name)
    answers = [infer(server, name, f"{name}-{n}") for n in range(3)]
    assert len({first_value(answer) for answer in answers}) == 1
    assert cache_counts(server, name) == (hits + 2, misses + 1)


def test_a_hit_answers_with_the_headers_the_model_set(server: ServerProcess) -> None:
    answers = [infer(server, "tokens", f"headers-{n}") for n in range(3)]
    token = str(first_value(answers[0]))
    assert [answer.headers["x-token"] for answer in answers] == [token] * 3
    assert all("headers" not in answer.json().get("parameters", {}) for answer in answers)


def test_grpc_metadata_is_not_part_of_the_key(server: ServerProcess) -> None:
    hits, misses = cache_counts(server, "tokens")
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        x = triton_grpc.InferInput("x", [1, 4], "FP32")
        x.set_data_from_numpy(np.asarray([[0.5, 1.5, 2.5, 3.5]], dtype=np.float32))
        answers = [client.infer("tokens", [x], headers={"x-request-id": f"g{n}"}) for n in range(3)]
        tokens = {answer.as_numpy("output-1").item() for answer in answers}
    assert len(tokens) == 1
    assert cache_counts(server, "tokens") == (hits + 2, misses + 1)
