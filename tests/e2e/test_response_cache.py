"""The response cache on a real server, in the main process and with two workers:
identical requests (JSON, binary or gRPC) are answered without running the model,
entries die with a reload, hits and misses are counted in statistics and metrics."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from inferd.protocol import pb, pb_grpc
from tests.support.models import write_model_folder
from tests.support.serverproc import ServerProcess

from .metrics_helpers import model, scrape, value

# Answers a fresh random token each time it runs: equal tokens mean one run.
TOKEN_RUNTIME = textwrap.dedent(
    """
    import os

    import numpy as np

    from inferd import InferenceRequest, InferenceResponse, Model, Tensor


    class Token(Model):
        def predict(self, request: InferenceRequest) -> InferenceResponse:
            token = np.frombuffer(os.urandom(8), dtype=np.int64)
            x = request.input("x").data
            return InferenceResponse(outputs=[Tensor("token", token), Tensor("sum", x.sum(1))])
    """
)
FEATURES = np.asarray([[1.5, 2.0, 3.25, 4.0]], dtype=np.float32)


def add_token_model(repository: Path, name: str, **settings: Any) -> None:
    files = {"tokens.py": TOKEN_RUNTIME}
    write_model_folder(repository, name, "tokens.Token", files=files, **settings)


def json_infer(server: ServerProcess, name: str, features: np.ndarray, **extra: Any) -> Any:
    body = {
        "id": extra.pop("id", "json"),
        "inputs": [
            {
                "name": "x",
                "datatype": "FP32",
                "shape": list(features.shape),
                "data": features.tolist(),
            }
        ],
        **extra,
    }
    response = httpx.post(f"{server.url}/v2/models/{name}/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def binary_infer(server: ServerProcess, name: str, features: np.ndarray) -> Any:
    raw = features.astype("<f4").tobytes()
    head = {
        "id": "binary",
        "inputs": [
            {
                "name": "x",
                "datatype": "FP32",
                "shape": list(features.shape),
                "parameters": {"binary_data_size": len(raw)},
            }
        ],
    }
    header = json.dumps(head).encode()
    response = httpx.post(
        f"{server.url}/v2/models/{name}/infer",
        content=header + raw,
        headers={"Inference-Header-Content-Length": str(len(header))},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response.json()


def grpc_token(server: ServerProcess, name: str, features: np.ndarray) -> int:
    request = pb.ModelInferRequest(model_name=name, id="grpc")
    request.inputs.add(name="x", datatype="FP32", shape=list(features.shape))
    request.raw_input_contents.append(features.astype("<f4").tobytes())
    with grpc.insecure_channel(server.grpc_address) as channel:
        reply = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    assert reply.id == "grpc"
    names = [output.name for output in reply.outputs]
    raw = reply.raw_output_contents[names.index("token")]
    return int(np.frombuffer(raw, dtype="<i8")[0])


def token(answer: Any) -> int:
    return next(o["data"][0] for o in answer["outputs"] if o["name"] == "token")


def cache_counts(server: ServerProcess, name: str) -> tuple[int, int]:
    stats = httpx.get(f"{server.url}/v2/models/{name}/stats", timeout=10).json()
    inference = stats["model_stats"][0]["inference_stats"]
    return inference["cache_hit"]["count"], inference["cache_miss"]["count"]


@pytest.mark.parametrize("workers", [0, 2])
def test_identical_requests_are_answered_from_the_cache(
    tmp_path: Path, start: Callable[..., ServerProcess], workers: int
) -> None:
    add_token_model(tmp_path, "cached", cache_enabled=True)
    add_token_model(tmp_path, "uncached")
    server = start(
        tmp_path, settings={"parallel_workers": workers, "cache_enabled": True, "cache_size": 10}
    )

    first = json_infer(server, "cached", FEATURES, id="first")
    again = json_infer(server, "cached", FEATURES, id="again")
    assert token(again) == token(first)
    assert again["id"] == "again" and again["model_name"] == "cached"
    binary = binary_infer(server, "cached", FEATURES)
    assert token(binary) == token(first) and binary["id"] == "binary"
    assert grpc_token(server, "cached", FEATURES) == token(first)
    # Transport parameters do not make a request different.
    steered = json_infer(server, "cached", FEATURES, parameters={"priority": 1})
    assert token(steered) == token(first)

    other = FEATURES.copy()
    other[0, 3] = np.nextafter(other[0, 3], np.float32(5))  # one bit differs
    assert token(json_infer(server, "cached", other)) != token(first)
    outputs = [{"name": "token"}]
    only_token = json_infer(server, "cached", FEATURES, outputs=outputs)
    assert token(only_token) != token(first)  # other outputs asked for: another entry
    assert [o["name"] for o in only_token["outputs"]] == ["token"]

    a, b = (json_infer(server, "uncached", FEATURES) for _ in range(2))
    assert token(a) != token(b)

    assert cache_counts(server, "cached") == (4, 3)
    assert cache_counts(server, "uncached") == (0, 0)
    samples = scrape(server.metrics_port)
    assert value(samples, "model_cache_hits_total", **model("cached")) == 4
    assert value(samples, "model_cache_misses_total", **model("cached")) == 3
    stats = httpx.get(f"{server.url}/v2/models/cached/stats", timeout=10).json()
    [entry] = stats["model_stats"]
    assert entry["inference_stats"]["success"]["count"] == 7
    assert entry["execution_count"] == 3  # hits run nothing

    # A reload starts from an empty cache: the new instance answers afresh.
    reload = httpx.post(f"{server.url}/v2/repository/models/cached/load", timeout=60)
    assert reload.status_code == 200, reload.text
    assert token(json_infer(server, "cached", FEATURES)) != token(first)


def test_the_cache_is_off_unless_the_server_turns_it_on(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    add_token_model(tmp_path, "wants", cache_enabled=True)
    server = start(tmp_path)
    a, b = (json_infer(server, "wants", FEATURES) for _ in range(2))
    assert token(a) != token(b)
    assert cache_counts(server, "wants") == (0, 0)
    assert "Model 'wants' sets cache_enabled, which has no effect" in server.log()


def test_cache_size_bounds_the_entries_and_unload_empties_it(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    add_token_model(tmp_path, "cached", cache_enabled=True)
    server = start(tmp_path, settings={"cache_enabled": True, "cache_size": 2})
    rows = [FEATURES + index for index in range(3)]
    tokens = [token(json_infer(server, "cached", row)) for row in rows]
    # rows[0] was the least recently used of three: it went; rows[2] stays.
    assert token(json_infer(server, "cached", rows[2])) == tokens[2]
    assert token(json_infer(server, "cached", rows[0])) != tokens[0]

    unload = httpx.post(f"{server.url}/v2/repository/models/cached/unload", timeout=60)
    assert unload.status_code == 200, unload.text
    load = httpx.post(f"{server.url}/v2/repository/models/cached/load", timeout=60)
    assert load.status_code == 200, load.text
    assert token(json_infer(server, "cached", rows[2])) != tokens[2]
