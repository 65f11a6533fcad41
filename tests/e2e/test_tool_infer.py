"""`inferd infer` against a real server (REST and gRPC) and a server that answers 503."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.serverproc import ServerProcess


def run_infer(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``inferd infer`` with ``args``; ``env``: variables added to this process's."""
    return subprocess.run(
        [sys.executable, "-m", "inferd", "infer", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


def write_requests(path: Path, features: np.ndarray, bad_line_at: int | None = None) -> None:
    lines = []
    for index, row in enumerate(features):
        request = {
            "id": f"row-{index}",
            "inputs": [{"name": "x", "datatype": "FP64", "shape": [1, 4], "data": row.tolist()}],
        }
        lines.append(json.dumps(request))
    if bad_line_at is not None:
        lines.insert(bad_line_at, '{"inputs": [{"name": "x", "datatype": "FP64"')
    path.write_text("\n".join(lines) + "\n")


def read_answers(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_infer_writes_responses_in_input_order(
    server: ServerProcess, iris_features: np.ndarray, tmp_path: Path, transport: str
) -> None:
    features = iris_features[:40]
    write_requests(tmp_path / "in.jsonl", features)
    port = server.http_port if transport == "rest" else server.grpc_port
    result = run_infer(
        *("-u", f"127.0.0.1:{port}", "-m", "iris", "-t", transport, "-w", "4"),
        *("-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")),
    )
    assert result.returncode == 0, result.stderr
    answers = read_answers(tmp_path / "out.jsonl")
    assert [a["parameters"]["batch_index"] for a in answers] == list(range(40))
    assert [a["id"] for a in answers] == [f"row-{i}" for i in range(40)]
    assert all(a["model_name"] == "iris" for a in answers)
    assert "40 requests: 40 succeeded, 0 failed" in result.stderr
    assert "requests/s" in result.stderr


def test_infer_micro_batches_and_reports_a_failing_line(
    server: ServerProcess, iris_features: np.ndarray, tmp_path: Path
) -> None:
    write_requests(tmp_path / "in.jsonl", iris_features[:9], bad_line_at=4)
    result = run_infer(
        *("-u", f"127.0.0.1:{server.http_port}", "-m", "iris", "-s", "3", "-b"),
        *("-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")),
    )
    assert result.returncode == 1  # a failed line makes the run fail
    answers = read_answers(tmp_path / "out.jsonl")
    assert [a["parameters"]["batch_index"] for a in answers] == list(range(10))
    assert answers[4]["error"]["status"] == "preprocessing error"
    good = [a for a in answers if "error" not in a]
    assert len(good) == 9
    assert all(a["outputs"][0]["shape"][0] == 1 for a in good)  # split back: one row each
    assert "10 requests: 9 succeeded, 1 failed" in result.stderr


def test_a_line_whose_data_does_not_fit_its_shape_is_a_preprocessing_error(
    server: ServerProcess, iris_features: np.ndarray, tmp_path: Path
) -> None:
    write_requests(tmp_path / "in.jsonl", iris_features[:3])
    bad = {"inputs": [{"name": "x", "datatype": "FP64", "shape": [1, 4], "data": [[1, 2], [3, 4]]}]}
    with (tmp_path / "in.jsonl").open("a") as lines:
        lines.write(json.dumps(bad) + "\n")
    result = run_infer(  # -b: the tool reads each line's tensors to send them binary
        *("-u", f"127.0.0.1:{server.http_port}", "-m", "iris", "-b"),
        *("-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")),
    )
    assert result.returncode == 1
    answers = read_answers(tmp_path / "out.jsonl")
    assert answers[3]["error"]["status"] == "preprocessing error"
    assert "does not match its nested data, which nests as [2, 2]" in answers[3]["error"]["msg"]
    assert "4 requests: 3 succeeded, 1 failed" in result.stderr


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_infer_reads_the_model_version_and_order_from_the_environment(
    server: ServerProcess, tmp_path: Path, transport: str
) -> None:
    lines = [
        json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [i]}]})
        for i in range(6)
    ]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    port = server.http_port if transport == "rest" else server.grpc_port
    result = run_infer(
        *("-u", f"127.0.0.1:{port}", "-m", "double", "-t", transport),
        *("-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")),
        env={"MLSERVER_INFER_MODEL_VERSION": "1", "MLSERVER_INFER_PRESERVE_ORDER": "false"},
    )
    assert result.returncode == 0, result.stderr
    answers = read_answers(tmp_path / "out.jsonl")
    assert {a["model_version"] for a in answers} == {"1"}  # not the latest, 2
    doubled = {a["parameters"]["batch_index"]: a["outputs"][0]["data"] for a in answers}
    assert doubled == {i: [2.0 * i] for i in range(6)}


def test_infer_reports_server_errors_without_retrying(
    server: ServerProcess, tmp_path: Path
) -> None:
    request = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    (tmp_path / "in.jsonl").write_text(json.dumps(request) + "\n")
    result = run_infer(
        *("-u", f"127.0.0.1:{server.http_port}", "-m", "fails", "-v"),
        *("-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")),
    )
    assert result.returncode == 1
    [answer] = read_answers(tmp_path / "out.jsonl")
    assert answer["error"]["status"].startswith("inference error (")
    assert "0 retried" in result.stderr


class _Flaky(BaseHTTPRequestHandler):
    """Answers 503 (Retry-After: 0) to the first two attempts of every request id."""

    protocol_version = "HTTP/1.1"
    attempts: dict[str, int] = {}
    lock = threading.Lock()

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            seen = self.attempts[request["id"]] = self.attempts.get(request["id"], 0) + 1
        if seen <= 2:
            self._answer(503, {"error": "overloaded"}, {"Retry-After": "0"})
        else:
            outputs = [{"name": "y", "datatype": "INT64", "shape": [1], "data": [seen]}]
            self._answer(200, {"model_name": "m", "id": request["id"], "outputs": outputs})

    def _answer(self, status: int, body: dict[str, Any], headers: dict[str, str] = {}) -> None:  # noqa: B006
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def flaky_server() -> Iterator[int]:
    _Flaky.attempts = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_infer_retries_503_then_gives_up_after_its_attempts(
    flaky_server: int, tmp_path: Path
) -> None:
    request = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    lines = [json.dumps({**request, "id": f"r{i}"}) for i in range(5)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    base = ("-u", f"127.0.0.1:{flaky_server}", "-m", "m", "-i", str(tmp_path / "in.jsonl"))
    result = run_infer(*base, "-o", str(tmp_path / "out.jsonl"), "-r", "3")
    assert result.returncode == 0, result.stderr
    answers = read_answers(tmp_path / "out.jsonl")
    assert [a["outputs"][0]["data"] for a in answers] == [[3]] * 5  # third attempt answered
    assert "5 succeeded, 0 failed, 10 retried" in result.stderr

    _Flaky.attempts = {}
    result = run_infer(*base, "-o", str(tmp_path / "out2.jsonl"), "-r", "2")
    assert result.returncode == 1
    answers = read_answers(tmp_path / "out2.jsonl")
    assert all(a["error"]["status"] == "inference error (503)" for a in answers)
    assert all(a["error"]["msg"] == "overloaded" for a in answers)
