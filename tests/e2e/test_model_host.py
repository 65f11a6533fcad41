"""A model run by the model host behaves, through two protocol processes, as on a
lone server (docs/design.md "The model host"). A client's cancel and disconnect
reaching the host's queue are test_batching's tests, run there in a model-host
layout too.

`tokens` (an MLServer MLModel that sets ``workers``, so the host runs it) keeps one
response cache and one copy of its custom route's state for every process's
clients, and its response headers come back.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.models import write_model_folder
from tests.support.serverproc import ServerProcess, start_server

from .test_response_cache_routes import MLMODEL_RUNTIME, ROW


def test_a_hosted_models_cache_and_custom_route_are_one_for_every_process(
    tmp_path: Path,
) -> None:
    files = {"models.py": MLMODEL_RUNTIME}
    write_model_folder(
        tmp_path, "tokens", "models.TokenModel", files=files, cache_enabled=True, workers=1
    )
    settings = {"protocol_processes": 2, "cache_enabled": True, "cache_size": 10}
    with start_server(tmp_path, settings) as server:
        _one_cache_and_route(server)


def _one_cache_and_route(server: ServerProcess) -> None:
    # Fresh connections: the kernel spreads them over both protocol processes.
    answers = [
        httpx.post(f"{server.url}/v2/models/tokens/infer", json={"inputs": [ROW]}, timeout=30)
        for _ in range(6)
    ]
    assert all(answer.status_code == 200 for answer in answers), answers[0].text
    tokens = {answer.json()["outputs"][0]["data"][0] for answer in answers}
    assert len(tokens) == 1, "the host's one cache answered every process's requests"
    assert {answer.headers["x-token"] for answer in answers} == {str(tokens.pop())}
    bumps = [
        httpx.post(f"{server.url}/counter/bump", json={"same": "body"}, timeout=30)
        for _ in range(4)
    ]
    assert [(bump.status_code, bump.json()) for bump in bumps] == [
        (200, {"calls": calls}) for calls in (1, 2, 3, 4)
    ], "one copy of the model counts every process's calls, none from the cache"
