"""The MLServer-style folders served by MLServer 1.7.1 and by inferd answer alike:
same outputs, datatypes, shapes and parameters for the same requests (REST and
gRPC), same error status, same streamed events, same custom routes and headers.

Needs MLServer's Python (its own virtualenv, as the benchmarks use):
INFERD_BENCH_MLSERVER_PYTHON=/path/to/venv/bin/python; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc

from tests.support.serverproc import (
    READY_PATH,
    ServerProcess,
    free_ports,
    server_environment,
    spawn,
    start_server,
    write_settings,
)

from .mlserver_folders import copy_folders

MLSERVER_PYTHON = os.environ.get("INFERD_BENCH_MLSERVER_PYTHON")
MLSERVER_MAIN = "import sys; from mlserver.cli import main; sys.exit(main())"

pytestmark = [
    pytest.mark.mlserver,
    pytest.mark.skipif(not MLSERVER_PYTHON, reason="INFERD_BENCH_MLSERVER_PYTHON is not set"),
]

NUMPY = {"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]}
TEXT = {"name": "text", "datatype": "BYTES", "shape": [2], "data": ["ab", "héllo"]}
FRAME = [
    {"name": "a", "datatype": "INT64", "shape": [3], "data": [1, 2, 3]},
    {"name": "b", "datatype": "FP64", "shape": [3, 1], "data": [0.5, 0.25, 0.0]},
    {"name": "name", "datatype": "BYTES", "shape": [3], "data": ["x", "y", "z"]},
]
CSV = {
    "name": "rows",
    "datatype": "BYTES",
    "shape": [2],
    "data": ["1,2", "3,4.5"],
    "parameters": {"content_type": "csv"},
}
# Sent as "line" to a model that declares "rows": its codec makes one from the other.
LINES = {
    "name": "line",
    "datatype": "BYTES",
    "shape": [1],
    "data": ["1,2\n3,4.5"],
    "parameters": {"content_type": "csv-lines"},
}
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "numpy": ("numpy-model", {"inputs": [NUMPY]}),
    "numpy-ints": ("numpy-model", {"inputs": [{**NUMPY, "datatype": "INT32"}]}),
    "text": ("text-model", {"inputs": [TEXT]}),
    "pandas": ("pandas-model", {"inputs": FRAME}),
    "pandas-tagged": ("pandas-model", {"inputs": FRAME, "parameters": {"content_type": "pd"}}),
    "codec": ("codec-model", {"inputs": [CSV]}),
    "codec-declared": ("csv-codec", {"inputs": [LINES]}),
    "handler": ("handler-model", {"inputs": [{**NUMPY, "name": "n"}]}),
    "example": ("mlserver-keywords", {"inputs": [{**TEXT, "data": ["a fast server", "no"]}]}),
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    inferd_repo = copy_folders(tmp_path_factory.mktemp("diff-inferd"))
    mlserver_repo = copy_folders(tmp_path_factory.mktemp("diff-mlserver"))
    inferd = start_server(inferd_repo)
    try:
        mlserver = _start_mlserver(mlserver_repo)
    except BaseException:
        inferd.stop()
        raise
    yield {"inferd": inferd, "mlserver": mlserver}
    inferd.stop()
    mlserver.stop()


def _start_mlserver(repository: Path) -> ServerProcess:
    ports = free_ports(3)
    write_settings(
        repository,
        {
            "host": "127.0.0.1",
            "http_port": ports[0],
            "grpc_port": ports[1],
            "metrics_port": ports[2],
            "parallel_workers": 0,
        },
    )
    assert MLSERVER_PYTHON is not None and shutil.which(MLSERVER_PYTHON)
    server = spawn(
        [MLSERVER_PYTHON, "-c", MLSERVER_MAIN, "start", str(repository)],
        repository=repository,
        cwd=repository,
        log_path=repository / "mlserver.log",
        ports=ports,
        env=server_environment(),
    )
    try:
        server.wait_until(READY_PATH, timeout=120)
    except BaseException:
        server.stop()
        raise
    return server


def answer(server: ServerProcess, model: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=30)


def comparable(body: dict[str, Any]) -> dict[str, Any]:
    """What must match: outputs (name, datatype, shape, data, parameters) and the
    response's parameters; ids (MLServer makes one up) and headers are left out."""
    parameters = dict(body.get("parameters") or {})
    parameters.pop("headers", None)
    return {"outputs": body["outputs"], "parameters": parameters}


@pytest.mark.parametrize("case", sorted(REQUESTS))
def test_rest_answers_match(servers: dict[str, ServerProcess], case: str) -> None:
    model, body = REQUESTS[case]
    ours, theirs = (answer(servers[name], model, body) for name in ("inferd", "mlserver"))
    assert (ours.status_code, theirs.status_code) == (200, 200), theirs.text
    assert comparable(ours.json()) == comparable(theirs.json())
    assert ours.json()["model_name"] == theirs.json()["model_name"]
    assert ours.json().get("model_version") == theirs.json().get("model_version")


def test_grpc_answers_match(servers: dict[str, ServerProcess]) -> None:
    results = {}
    for name, server in servers.items():
        with triton_grpc.InferenceServerClient(server.grpc_address) as client:
            x = triton_grpc.InferInput("x", [2, 2], "FP32")
            x.set_data_from_numpy(np.array([[1, 2], [3, 4]], dtype=np.float32))
            text = triton_grpc.InferInput("text", [1], "BYTES")
            text.set_data_from_numpy(np.array([b"grpc"], dtype=object))
            numeric = client.infer("numpy-model", [x])
            words = client.infer("text-model", [text])
        results[name] = (
            numeric.as_numpy("output-0").tolist(),
            numeric.get_output("output-0").datatype,
            list(numeric.get_output("output-0").shape),
            words.as_numpy("upper").tolist(),
            list(words.get_output("upper").shape),
        )
    assert results["inferd"] == results["mlserver"]


def test_mlserver_error_status_matches(servers: dict[str, ServerProcess]) -> None:
    body = {"inputs": [{**TEXT, "shape": [1], "data": [""]}]}
    ours, theirs = (answer(servers[name], "text-model", body) for name in ("inferd", "mlserver"))
    assert ours.status_code == theirs.status_code == 400
    assert ours.json()["error"] == theirs.json()["error"]


def test_streamed_events_match(servers: dict[str, ServerProcess]) -> None:
    body = {"inputs": [{**TEXT, "shape": [1], "data": ["one two three"]}]}
    events = {}
    for name, server in servers.items():
        url = f"{server.url}/v2/models/stream-model/infer_stream"
        with httpx.stream("POST", url, json=body, timeout=30) as response:
            assert response.status_code == 200
            lines = [line[5:] for line in response.iter_lines() if line.startswith("data:")]
        events[name] = [comparable(json.loads(line)) for line in lines]
    assert events["inferd"] == events["mlserver"]
    assert len(events["inferd"]) == 3


def test_custom_routes_and_headers_match(servers: dict[str, ServerProcess]) -> None:
    seen = {}
    for name, server in servers.items():
        tagged = httpx.post(
            f"{server.url}/v2/models/handler-model/infer",
            json={"inputs": [NUMPY]},
            headers={"x-tag": "blue"},
            timeout=30,
        )
        echo = httpx.post(f"{server.url}/handler-model/echo", json={"a": [1]}, timeout=30)
        stats = httpx.get(f"{server.url}/handler-model/stats", timeout=30)
        keywords = httpx.get(f"{server.url}/keywords", timeout=30).json()
        seen[name] = (
            keywords,
            tagged.headers.get("x-echo-tag"),
            echo.status_code,
            echo.json()["received"],
            stats.status_code,
            sorted(stats.json()),
        )
    assert seen["inferd"] == seen["mlserver"]
    assert seen["inferd"][1] == "blue"
