"""`inferd start`'s flags end to end: they win over settings.json and the environment,
and reach every process of the server (protocol processes, the model host, workers);
a refused value stops the start with a usage error; `inferd settings` in a shell."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from tests.support.models import add_custom_model
from tests.support.procstat import served_by, workers
from tests.support.serverproc import free_ports, http_status, server_environment, start_server

from .each_process import ask_each

QUICK = 30.0  # a refused start or `inferd settings` exits within it


def refused(port: int) -> bool:
    """Whether nothing listens on ``port`` (the server did not take it)."""
    try:
        http_status(f"http://127.0.0.1:{port}/v2/health/live", timeout=1.0)
    except OSError:
        return True
    return False


def test_port_and_host_flags_win_over_the_file_and_the_environment(tmp_path: Path) -> None:
    add_custom_model(tmp_path, "echo", "Echo")
    env_http, env_grpc, http_port, grpc_port, metrics_port = free_ports(5)
    env = {"INFERD_HTTP_PORT": str(env_http), "MLSERVER_GRPC_PORT": str(env_grpc)}
    flags = ["--http-port", str(http_port), f"--grpc-port={grpc_port}"]
    flags += ["--metrics-port", str(metrics_port), "--host", "127.0.0.1"]
    with start_server(tmp_path, env=env, args=flags) as server:
        assert (server.http_port, server.grpc_port) == (http_port, grpc_port)
        in_file = json.loads((tmp_path / "settings.json").read_text())
        for port in (env_http, env_grpc, in_file["http_port"], in_file["grpc_port"]):
            assert refused(port)
        assert httpx.get(f"{server.url}/v2/models/echo/ready", timeout=30).status_code == 200
        with triton_grpc.InferenceServerClient(server.grpc_address) as grpc_client:
            assert grpc_client.is_model_ready("echo")
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30)
        assert metrics.status_code == 200 and "# TYPE" in metrics.text
        assert refused(in_file["metrics_port"])


def test_flags_reach_every_protocol_process_the_model_host_and_its_workers(
    tmp_path: Path,
) -> None:
    """settings.json says one protocol process, models in process, level error; the
    flags say three, two workers, debug: every process runs as the flags say."""
    add_custom_model(tmp_path, "chatty", "LogsAtDebug")
    settings = {"protocol_processes": 1, "parallel_workers": 0, "log_level": "error"}
    env = {"INFERD_LOG_LEVEL": "warning", "INFERD_PARALLEL_WORKERS": "0"}
    flags = ["--protocol-processes", "3", "--parallel-workers", "2", "--log-level", "debug"]
    with start_server(tmp_path, settings=settings, env=env, args=flags) as server:
        # Three protocol processes and the model host (--parallel-workers put the model
        # there), each logging at debug level.
        assert len(served_by(server.process.pid)) == 4
        answers = ask_each(server, "GET", "/v2/logging")
        assert [answer.json()["log_verbose_level"] for answer in answers] == [1, 1, 1]
        assert re.search(r" DEBUG \[model host \d\] ", server.log()), server.log()
        # The host runs the model in two workers, which log at debug level too.
        assert len(workers(server.process.pid)) == 2
        with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as client:
            tensor = triton_http.InferInput("x", [1], "INT64")
            tensor.set_data_from_numpy(np.zeros(1, np.int64))
            result = client.infer("chatty", [tensor], request_id="flagged-1")
        pid = int(result.as_numpy("pid")[0])
        assert pid in workers(server.process.pid)
        assert f"debug line of flagged-1 from pid {pid}" in server.log()


def inferd(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd", *arguments],
        capture_output=True,
        text=True,
        env=server_environment(env),
        timeout=QUICK,
    )


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--http-port", "eighty", "http_port: Input should be a valid integer"),
        ("--protocol-processes", "0", "protocol_processes: Input should be greater than"),
        ("--log-level", "loud", "log_level: Input should be 'debug'"),
    ],
)
def test_a_refused_flag_stops_the_start_with_a_usage_error(
    tmp_path: Path, flag: str, value: str, expected: str
) -> None:
    (http_port,) = free_ports(1)
    result = inferd("start", str(tmp_path), "--http-port", str(http_port), flag, value)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert f"(got {value!r} from option {flag})" in result.stderr
    assert "Traceback" not in result.stderr
    assert refused(http_port)


def test_inferd_settings_in_a_shell(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps({"grpc_port": 9001}))
    env = {"MLSERVER_METRICS_PORT": "9002"}
    table = inferd("settings", str(tmp_path), "--http-port", "9000", env=env)
    assert table.returncode == 0, table.stderr
    lines = {line.split()[0]: line.split(None, 2)[1:] for line in table.stdout.splitlines()}
    assert lines["http_port"] == ["9000", "flag --http-port"]
    assert lines["grpc_port"] == ["9001", f"file {tmp_path / 'settings.json'}"]
    assert lines["metrics_port"] == ["9002", "environment MLSERVER_METRICS_PORT"]
    as_json = json.loads(inferd("settings", str(tmp_path), "--json", env=env).stdout)
    assert as_json["metrics_port"] == {
        "value": 9002,
        "source": "environment",
        "from": "MLSERVER_METRICS_PORT",
    }
