"""Start a server process on free ports, wait until it answers, stop it and its children.

The e2e tests and the benchmarks (``python -m benchmarks``, run from the
repository root) both start servers with this module, so they pick ports, poll
for readiness and stop process groups the same way. It uses the standard
library only: a benchmark may run from an interpreter without the test extras.

``start_server`` runs one protocol process unless the test's settings say
otherwise; the environment variable ``INFERD_TEST_PROTOCOL_PROCESSES`` (read when
a server starts) changes that default for a whole run, e.g.
``INFERD_TEST_PROTOCOL_PROCESSES=2 pytest tests/e2e/test_stats.py`` to see
whether what a module checks still holds with two protocol processes.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common.polling import wait_for

START_TIMEOUT = 60.0
READY_PATH = "/v2/health/ready"
POLL_INTERVAL = 0.05
# Sets the protocol_processes a started server gets when its settings name none.
PROTOCOL_PROCESSES_ENV = "INFERD_TEST_PROTOCOL_PROCESSES"
# A setting start_server leaves out of settings.json, so that its default applies.
LEFT_OUT: Any = object()
# Polling 127.0.0.1 must never go through an HTTP proxy set in the environment.
_LOCAL_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (each socket is held until all are
    picked, so none comes twice; another process may still take one before the server)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port() -> int:
    return free_ports(1)[0]


def http_status(url: str, timeout: float = 2.0, ca_file: Path | None = None) -> int:
    """The status of ``GET url`` (4xx and 5xx included); OSError when nothing answers,
    http.client.HTTPException when what answers is not HTTP. An https ``url`` is
    trusted if signed by ``ca_file``."""
    opener = _LOCAL_OPENER
    if ca_file is not None:
        context = ssl.create_default_context(cafile=str(ca_file))
        handlers = (urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
        opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@dataclass
class ServerProcess:
    """A server in its own process group (it and its workers), logging to ``log_path``."""

    repository: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    started_at: float = field(default_factory=time.monotonic)
    # Set for a server that serves REST over TLS: its certificate's CA.
    ca_file: Path | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ca_file is not None else "http"
        return f"{scheme}://127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until(
        self,
        path: str = READY_PATH,
        status: int = 200,
        timeout: float = START_TIMEOUT,
        port: int | None = None,
    ) -> float:
        """Poll ``GET path`` (on ``port``, default the HTTP port) until it answers
        ``status``; fail with the server's log if the deadline passes or the process
        ends first. Returns the seconds since the process started."""
        scheme = "https" if self.ca_file is not None and port in (None, self.http_port) else "http"
        url = f"{scheme}://127.0.0.1:{port or self.http_port}{path}"
        last: list[object] = [None]  # what the latest poll saw, for the failure message

        def answered() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.describe()} exited with {self.process.returncode}:\n{self.log()}"
                )
            try:
                last[0] = http_status(url, ca_file=self.ca_file)
            except (OSError, http.client.HTTPException) as error:  # not listening, or half-up
                last[0] = error
            return last[0] == status

        def what() -> str:
            return f"{path} to answer {status} (last: {last[0]}):\n{self.log()}"

        wait_for(answered, what, timeout, POLL_INTERVAL)
        return time.monotonic() - self.started_at

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM the server (it stops its own workers), SIGKILL its whole process
        group if it is not gone within ``timeout``; then kill anything of the group
        still left (a worker it lost track of)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_group()
                self.process.wait()
        self._kill_group()
        return self.process.returncode

    def describe(self) -> str:
        command = self.process.args
        return " ".join(map(str, command)) if isinstance(command, list) else str(command)

    def _kill_group(self) -> None:
        # The server leads its own process group (spawn), so the group id is its pid;
        # nothing is left to kill once it and its children have gone.
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def server_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without INFERD_/MLSERVER_ variables (the settings a
    server gets come from its files and ``extra`` alone), plus ``extra``."""
    prefixes = ("MLSERVER_", "INFERD_")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(prefixes)}
    env.update(extra or {})
    return env


def spawn(
    command: Sequence[str],
    *,
    repository: Path,
    log_path: Path,
    ports: Sequence[int],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    ca_file: Path | None = None,
    own_session: bool = True,
) -> ServerProcess:
    """Start ``command`` in a new process group, stdout and stderr to ``log_path``.

    ``ports`` are the HTTP, gRPC and metrics ports the caller told it to use;
    ``env`` is its whole environment (default: this process's); ``ca_file``: the CA
    of the certificate it serves REST with, if it serves TLS. ``own_session``: the
    group leads a session of its own (under Linux's autogroup, a scheduling group of
    its own too), else it stays in this process's session (benchmarks' --shared-session)."""
    http_port, grpc_port, metrics_port = ports
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            # Its own process group either way: stop() reaches its workers.
            start_new_session=own_session,
            process_group=None if own_session else 0,
        )
    server = ServerProcess(repository, process, log_path, http_port, grpc_port, metrics_port)
    server.ca_file = ca_file
    return server


def default_protocol_processes() -> int:
    """The protocol_processes a test server runs unless its settings say: 1, or
    ``$INFERD_TEST_PROTOCOL_PROCESSES``."""
    value = os.environ.get(PROTOCOL_PROCESSES_ENV, "1")
    try:
        count = int(value)
    except ValueError:
        message = f"{PROTOCOL_PROCESSES_ENV} must be a whole number, not {value!r}"
        raise ValueError(message) from None
    if count < 1:
        raise ValueError(f"{PROTOCOL_PROCESSES_ENV} must be at least 1, not {count}")
    return count


def write_settings(repository: Path, settings: Mapping[str, Any]) -> None:
    (repository / "settings.json").write_text(json.dumps(dict(settings)))


def start_server(
    repository: Path,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    wait: str | None = READY_PATH,
    log_dir: Path | None = None,
    args: Sequence[str] = (),
) -> ServerProcess:
    """Write ``settings.json`` with free ports into ``repository`` and start inferd.

    A setting given as :data:`LEFT_OUT` is not written (its default applies: e.g.
    ``parallel_workers``, which the tests otherwise set to 0); None is written as
    null. ``wait`` is the path polled for a 200 before returning (None: don't wait).
    ``args`` follow ``inferd start REPOSITORY``: flags, which win over the file (a
    port flag's port is the one polled).
    """
    http_port, grpc_port, metrics_port = free_ports(3)
    ports = {"http_port": http_port, "grpc_port": grpc_port, "metrics_port": metrics_port}
    full_settings = {
        "host": "127.0.0.1",
        "parallel_workers": 0,
        "protocol_processes": default_protocol_processes(),
        **ports,
        **(settings or {}),
    }
    full_settings = {key: value for key, value in full_settings.items() if value is not LEFT_OUT}
    write_settings(repository, full_settings)
    server = spawn(
        [sys.executable, "-m", "inferd", "start", str(repository), *args],
        repository=repository,
        log_path=(log_dir or repository) / f"inferd-{http_port}.log",
        ports=[
            int(_flag_value(args, name) or full_settings[name])
            for name in ("http_port", "grpc_port", "metrics_port")
        ],
        env=server_environment(env),
    )
    if wait:
        try:
            server.wait_until(wait)
        except BaseException:
            server.stop()
            raise
    return server


def _flag_value(args: Sequence[str], setting: str) -> str | None:
    """The value ``args`` give a setting's flag (``--http-port 80``, ``--http-port=80``)."""
    flag = "--" + setting.replace("_", "-")
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
