"""Shared helpers for the inferd-vs-MLServer benchmarks.

Only the standard library plus numpy / scikit-learn / joblib are used, so the
harness runs from any interpreter that has those (e.g. ``/work/main/.venv``),
independently of the servers under test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from contextlib import ExitStack, closing, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

SKLEARN_IMPLEMENTATION = "mlserver_sklearn.SKLearnModel"
MODEL_FILE = "model.joblib"
HEALTH_READY_PATH = "/v2/health/ready"
WRK_MARKER = "INFERD_WRK_RESULT"


# --------------------------------------------------------------------------- ports


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free TCP ports on 127.0.0.1.

    All sockets are held open until every port is picked so the same port is
    never returned twice; there is still a small race with other processes.
    """
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


@dataclass(frozen=True)
class ServerPorts:
    http: int
    grpc: int
    metrics: int

    @classmethod
    def allocate(cls) -> ServerPorts:
        http, grpc, metrics = free_ports(3)
        return cls(http=http, grpc=grpc, metrics=metrics)


# --------------------------------------------------------------------- model repo


def train_iris_model() -> LogisticRegression:
    """Deterministic LogisticRegression on iris (4 FP32 features, 3 classes)."""
    features, target = load_iris(return_X_y=True)
    model = LogisticRegression(max_iter=1000, random_state=0)
    model.fit(features.astype(np.float32), target)
    return model


def write_settings(
    repo: Path, ports: ServerPorts, parallel_workers: int, extra: dict[str, Any] | None
) -> Path:
    settings: dict[str, Any] = {
        "http_port": ports.http,
        "grpc_port": ports.grpc,
        "metrics_port": ports.metrics,
        "parallel_workers": parallel_workers,
    }
    settings.update(extra or {})
    path = repo / "settings.json"
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return path


def write_sklearn_model(repo: Path, name: str, model: LogisticRegression) -> Path:
    model_dir = repo / name
    model_dir.mkdir(parents=True, exist_ok=True)
    model_settings = {
        "name": name,
        "implementation": SKLEARN_IMPLEMENTATION,
        "parameters": {"uri": f"./{MODEL_FILE}"},
    }
    (model_dir / "model-settings.json").write_text(json.dumps(model_settings, indent=2) + "\n")
    joblib.dump(model, model_dir / MODEL_FILE)
    return model_dir


def write_model_repo(
    repo: Path,
    ports: ServerPorts,
    *,
    model_name: str = "iris",
    parallel_workers: int = 0,
    extra_settings: dict[str, Any] | None = None,
    model: LogisticRegression | None = None,
) -> Path:
    """Write ``settings.json`` + ``<model_name>/{model-settings.json,model.joblib}``."""
    repo.mkdir(parents=True, exist_ok=True)
    write_settings(repo, ports, parallel_workers, extra_settings)
    write_sklearn_model(repo, model_name, model if model is not None else train_iris_model())
    return repo


# ------------------------------------------------------------------------- server


class ServerError(RuntimeError):
    """The server under test failed to start, died, or misbehaved."""


def http_get_status(url: str, timeout: float = 1.0) -> int | None:
    """Status code of ``GET url``; ``None`` when the connection fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, TimeoutError):
        return None


def post_json(url: str, body: dict[str, Any], timeout: float = 10.0) -> tuple[int, Any]:
    """POST a JSON body; returns ``(status, decoded JSON or raw text)``."""
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = int(exc.code), exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def tail_file(path: Path, max_chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-max_chars:]
    except OSError:
        return "<no log>"


@dataclass
class ServerProcess:
    """A server subprocess in its own process group, logging to ``log_path``."""

    command: Sequence[str]
    cwd: Path
    log_path: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    startup_s: float | None = field(default=None, init=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                list(self.command),
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own session => own process group
            )

    def wait_ready(self, base_url: str, timeout_s: float = 90.0, poll_s: float = 0.1) -> float:
        """Poll ``GET /v2/health/ready`` until 200; returns seconds from start."""
        assert self.proc is not None, "start() first"
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(self._failure(f"exited with code {self.proc.returncode}"))
            if http_get_status(base_url + HEALTH_READY_PATH, timeout=poll_s * 10) == 200:
                self.startup_s = time.monotonic() - started
                return self.startup_s
            time.sleep(poll_s)
        raise ServerError(self._failure(f"not ready after {timeout_s:.0f}s"))

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM the whole process group, SIGKILL it if still alive after timeout."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # leader of its own group thanks to start_new_session
        _signal_group(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            self.proc.wait(timeout=timeout_s)
        _signal_group(pgid, signal.SIGKILL)  # reap stragglers (e.g. worker processes)
        return self.proc.returncode

    def _failure(self, what: str) -> str:
        return f"{' '.join(self.command)} {what}; log {self.log_path}:\n{tail_file(self.log_path)}"

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# --------------------------------------------------------------------------- wrk

_WRK_LUA = """\
wrk.method = "POST"
wrk.body = [==[{body}]==]
wrk.headers["Content-Type"] = "application/json"

-- No response() callback: it makes wrk parse every body in Lua, which costs
-- enough CPU on a 2-core machine to skew the comparison. wrk counts non-2xx
-- answers itself (summary.errors.status).
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "{marker} requests=%d duration_us=%d bytes=%d non2xx=%d connect=%d read=%d "
      .. "write=%d status=%d timeout=%d p50_us=%d p90_us=%d p99_us=%d "
      .. "mean_us=%.1f max_us=%d\\n",
    summary.requests, summary.duration, summary.bytes, e.status, e.connect, e.read,
    e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, latency.max))
end
"""

_WRK_LINE = re.compile(rf"^{WRK_MARKER} (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class LoadResult:
    """What every load generator run reports; subclasses add how errors are counted."""

    requests: int
    duration_s: float
    requests_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float

    @property
    def errors(self) -> int:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "errors": self.errors}


@dataclass(frozen=True)
class WrkResult(LoadResult):
    non2xx: int
    socket_errors: dict[str, int]

    @property
    def errors(self) -> int:
        """Non-2xx responses plus socket errors (connect/read/write/timeout)."""
        return self.non2xx + sum(self.socket_errors.values())


def wrk_lua_script(body: str) -> str:
    if "]==]" in body:
        raise ValueError("request body may not contain ']==]'")
    return _WRK_LUA.format(body=body, marker=WRK_MARKER)


def parse_wrk_output(stdout: str) -> WrkResult:
    match = _WRK_LINE.search(stdout)
    if match is None:
        raise RuntimeError(f"wrk printed no {WRK_MARKER} line:\n{stdout}")
    raw = {k: float(v) for k, v in (kv.split("=", 1) for kv in match.group(1).split())}
    duration_s = raw["duration_us"] / 1e6
    return WrkResult(
        requests=int(raw["requests"]),
        duration_s=duration_s,
        requests_per_s=raw["requests"] / duration_s if duration_s else 0.0,
        p50_ms=raw["p50_us"] / 1e3,
        p90_ms=raw["p90_us"] / 1e3,
        p99_ms=raw["p99_us"] / 1e3,
        mean_ms=raw["mean_us"] / 1e3,
        max_ms=raw["max_us"] / 1e3,
        non2xx=int(raw["non2xx"]),
        socket_errors={k: int(raw[k]) for k in ("connect", "read", "write", "timeout")},
    )


def run_wrk(
    url: str,
    body: str,
    *,
    connections: int = 16,
    threads: int = 1,
    duration_s: float = 10.0,
    timeout_s: float = 10.0,
    wrk_bin: str = "wrk",
) -> WrkResult:
    """Run ``wrk`` POSTing ``body`` (a JSON string) to ``url`` and parse its result."""
    exe = shutil.which(wrk_bin)
    if exe is None:
        raise RuntimeError(f"{wrk_bin!r} not found (apt-get install -y wrk)")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(wrk_lua_script(body))
    try:
        cmd = [
            exe, f"-t{threads}", f"-c{connections}", f"-d{duration_s:g}s",
            f"--timeout={timeout_s:g}s", "-s", script.name, url,
        ]  # fmt: skip
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=duration_s + timeout_s + 30
        )
    finally:
        os.unlink(script.name)
    if done.returncode != 0:
        raise RuntimeError(f"wrk exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return parse_wrk_output(done.stdout)


def exit_status(errors: int, failed_runs: int) -> int:
    """Say what went wrong; 0 ok, 1 a run did not complete, 2 errors during a run."""
    if errors:
        print(f"\nFAILED: {errors} errors during measured runs", file=sys.stderr)
    if failed_runs:
        print(f"\nFAILED: {failed_runs} run(s) did not complete", file=sys.stderr)
    return 1 if failed_runs else 2 if errors else 0
