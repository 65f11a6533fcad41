"""Logs: one debug line per request, JSON lines, the access-log switch, lifecycle events."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess

X = {"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}
REQUEST_LOGGER = "inferd.requests"


def write_models(repository: Path) -> Path:
    """`echo`, and `fails` (every call fails)."""
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "fails", "FailsToPredict")
    return repository


def make_requests(server: ServerProcess) -> None:
    """Two successes and one failure over REST, one of each over gRPC, and a scrape."""
    for name, status in (("echo", 200), ("echo", 200), ("fails", 500)):
        response = httpx.post(f"{server.url}/v2/models/{name}/infer", json={"inputs": [X]})
        assert response.status_code == status
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        tensor = triton_grpc.InferInput("x", [2], "FP32")
        tensor.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
        client.infer("echo", [tensor], request_id="grpc-1")
        with pytest.raises(InferenceServerException):
            client.infer("fails", [tensor])
    httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").raise_for_status()


def text_lines(server: ServerProcess, needle: str) -> list[str]:
    return [line for line in server.log().splitlines() if needle in line]


def json_lines(server: ServerProcess) -> list[dict[str, Any]]:
    """Every log line as JSON; fails on a line that is not."""
    return [json.loads(line) for line in server.log().splitlines() if line.strip()]


def test_debug_logs_one_line_per_inference_request(
    repository: Path, start: Callable[..., ServerProcess]
) -> None:
    server = start(repository, settings={"debug": True, "access_log": False})
    make_requests(server)
    lines = text_lines(server, f"[{REQUEST_LOGGER}]")
    assert len(lines) == 5
    assert all(" DEBUG " in line for line in lines)
    assert sum("model 'echo' version '': ok in" in line for line in lines) == 3
    assert sum("model 'fails' version '': ModelError in" in line for line in lines) == 2
    assert sum("(id grpc-1)" in line for line in lines) == 1
    assert not text_lines(server, "[uvicorn.access]")


def test_structured_logs_are_json_lines_with_request_fields(
    repository: Path, start: Callable[..., ServerProcess]
) -> None:
    settings = {"debug": True, "use_structured_logging": True, "access_log": True}
    server = start(repository, settings=settings)
    make_requests(server)
    entries = json_lines(server)
    requests = [entry for entry in entries if entry["logger"] == REQUEST_LOGGER]
    assert [(e["model_name"], e["model_version"], e["outcome"]) for e in requests] == [
        ("echo", "", "ok"),
        ("echo", "", "ok"),
        ("fails", "", "ModelError"),
        ("echo", "", "ok"),
        ("fails", "", "ModelError"),
    ]
    assert all(e["level"] == "DEBUG" and e["duration_ms"] >= 0 for e in requests)
    access = [entry for entry in entries if entry["logger"] == "uvicorn.access"]
    infer_path = "/v2/models/{name}/infer"
    # The inference lines only: with protocol processes a readiness poll answered by
    # another process may be logged after them.
    infers = [e for e in access if e["path"].endswith("/infer")]
    assert [(e["method"], e["path"], e["status_code"]) for e in infers] == [
        ("POST", infer_path.format(name="echo"), 200),
        ("POST", infer_path.format(name="echo"), 200),
        ("POST", infer_path.format(name="fails"), 500),
    ]
    failures = [e for e in entries if e["level"] == "ERROR" and "fails" in e["message"]]
    assert failures and "this model always fails" in failures[0]["exception"]


def test_access_log_can_be_on_without_debug(
    repository: Path, start: Callable[..., ServerProcess]
) -> None:
    server = start(repository, settings={"access_log": True})
    make_requests(server)
    access = text_lines(server, "[uvicorn.access]")
    assert sum('"POST /v2/models/echo/infer HTTP/1.1" 200' in line for line in access) == 2
    assert sum('"POST /v2/models/fails/infer HTTP/1.1" 500' in line for line in access) == 1
    assert not [line for line in access if "/metrics" in line]  # scrapes stay out
    assert not text_lines(server, f"[{REQUEST_LOGGER}]")


def test_model_load_and_unload_are_logged_at_info(
    repository: Path, start: Callable[..., ServerProcess]
) -> None:
    server = start(repository)
    assert httpx.post(f"{server.url}/v2/repository/models/echo/unload").status_code == 200
    # With protocol processes each process's lines carry its tag after the level.
    tag = r"INFO (\[protocol process \d+\] )?\[inferd\.serving\.registry\] "
    assert re.search(tag + "Loaded model 'echo' in ", server.log())
    assert re.search(tag + "Unloaded model 'echo'", server.log())
    assert not text_lines(server, f"[{REQUEST_LOGGER}]")


def info_count(log: str, needle: str) -> int:
    return sum(" INFO " in line and needle in line for line in log.splitlines())


def test_a_server_of_three_processes_logs_each_server_event_once(
    repository: Path, start: Callable[..., ServerProcess]
) -> None:
    """Its events at INFO once (process 0 tells them); each process's own at DEBUG."""
    add_custom_model(repository, "hosted", "Echo", max_queue_size=4)  # runs in the model host
    server = start(repository, settings={"protocol_processes": 3, "debug": True})
    assert httpx.post(f"{server.url}/v2/repository/models/echo/unload").status_code == 200
    assert httpx.post(f"{server.url}/v2/repository/models/echo/load").status_code == 200
    serving = "inferd is serving with 3 protocol processes"
    wait_for(lambda: serving in server.log(), server.log)  # once every process answered ready
    log = server.log()
    for event in (
        f"REST server listening on 127.0.0.1:{server.http_port}",
        f"gRPC server listening on 127.0.0.1:{server.grpc_port}",
        "Loading model 'hosted' (in the model host)",
        "Loaded model 'hosted'",
        "Loaded model 'fails'",
        "inferd is ready",
        serving,
        "Unloading model 'echo'",
        "Unloaded model 'echo'",
    ):
        assert info_count(log, event) == 1, (event, log)
    assert info_count(log, "Loading model 'echo'") == 2, log  # at start, and loaded again
    assert info_count(log, "Started server process") == 0, log  # uvicorn's, per process
    assert info_count(log, "Private REST server listening") == 0, log
    # Each process's own lines are there at DEBUG, named.
    for index in (1, 2):
        assert f"DEBUG [protocol process {index}] [inferd.server.parts] inferd is ready" in log
    assert "DEBUG [model host 3] [inferd.serving.registry] Loaded model 'hosted'" in log
    # An orderly stop: the host stops with the protocol processes, which lose their
    # connection to it then as expected, with no warning (it is no failure).
    answer = httpx.post(f"{server.url}/v2/models/hosted/infer", json={"inputs": [X]})
    assert answer.status_code == 200, answer.text
    assert server.stop() == 0
    lost = [line for line in server.log().splitlines() if "Lost the connection" in line]
    assert not [line for line in lost if " WARNING " in line], lost
