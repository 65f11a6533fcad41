"""Start a real ``inferd start`` process on free ports and wait until it answers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    repository: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until(self, path: str, status: int = 200, timeout: float = START_TIMEOUT) -> None:
        """Poll ``path`` until it answers ``status``; fail with the server's log if not."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"inferd exited with {self.process.returncode}:\n{self.log()}")
            try:
                last = httpx.get(self.url + path, timeout=2).status_code
                if last == status:
                    return
            except httpx.TransportError as error:
                last = error
            time.sleep(0.05)
        raise TimeoutError(f"{path} did not answer {status} (last: {last}):\n{self.log()}")

    def stop(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


def write_settings(repository: Path, settings: Mapping[str, Any]) -> None:
    (repository / "settings.json").write_text(json.dumps(dict(settings)))


def start_server(
    repository: Path,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    wait: str | None = "/v2/health/ready",
    log_dir: Path | None = None,
) -> ServerProcess:
    """Write ``settings.json`` with free ports into ``repository`` and start inferd.

    ``wait`` is the path polled for a 200 before returning (None: don't wait).
    """
    ports = {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port()}
    full_settings = {"host": "127.0.0.1", "parallel_workers": 0, **ports, **(settings or {})}
    write_settings(repository, full_settings)
    log_path = (log_dir or repository) / f"inferd-{ports['http_port']}.log"
    process_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MLSERVER_", "INFERD_"))
    }
    process_env.update(env or {})
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "inferd", "start", str(repository)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=process_env,
            start_new_session=True,
        )
    server = ServerProcess(
        repository,
        process,
        log_path,
        int(full_settings["http_port"]),
        int(full_settings["grpc_port"]),
        int(full_settings["metrics_port"]),
        dict(env or {}),
    )
    if wait:
        try:
            server.wait_until(wait)
        except BaseException:
            server.stop()
            raise
    return server
