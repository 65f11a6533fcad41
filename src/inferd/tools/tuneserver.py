"""One ``inferd tune`` candidate: inferd serving one model with given settings.

The model's folder is mirrored into a temporary repository (its files linked,
not copied, so a large model costs nothing) with model-settings.json rewritten
with the candidate's model settings; settings.json gets the server settings and
free ports. The server runs in its own process group and is stopped with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from inferd.serving.repository import ModelRepository
from inferd.settings import ModelSettings
from inferd.settings.loader import load_server_settings

START_TIMEOUT_S = 120.0
SERVER_SETTINGS = ("parallel_workers",)


class TunedServer:
    def __init__(self, repository: Path, model_name: str, settings: dict[str, Any]) -> None:
        self.folder = _model_folder(repository, model_name)
        self.base = repository
        self.model_name = model_name
        self.settings = settings
        self.workdir = Path(tempfile.mkdtemp(prefix="inferd-tune-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.http_url = ""

    def __enter__(self) -> TunedServer:
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _start(self) -> None:
        repository = self.workdir / "repository"
        model_dir = repository / self.folder.name
        model_dir.mkdir(parents=True)
        for entry in self.folder.iterdir():
            if entry.name != "model-settings.json":
                (model_dir / entry.name).symlink_to(entry.resolve())
        model_settings = json.loads((self.folder / "model-settings.json").read_text())
        model_settings.update({k: v for k, v in self.settings.items() if k not in SERVER_SETTINGS})
        (model_dir / "model-settings.json").write_text(json.dumps(model_settings))
        http_port, grpc_port, metrics_port = _free_ports(3)
        server_settings = _base_settings(self.base)
        server_settings.update({k: v for k, v in self.settings.items() if k in SERVER_SETTINGS})
        server_settings.update(
            host="127.0.0.1", http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port
        )
        (repository / "settings.json").write_text(json.dumps(server_settings))
        self.http_url = f"127.0.0.1:{http_port}"
        log = (self.workdir / "server.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "inferd", "start", str(repository)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready(f"http://{self.http_url}/v2/models/{self.model_name}/ready")

    def _wait_ready(self, url: str) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                log = (self.workdir / "server.log").read_text(errors="replace")
                raise RuntimeError(f"inferd exited with {self.process.returncode}: {log[-500:]}")
            try:
                with opener.open(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the model was not ready within {START_TIMEOUT_S:.0f} s")

    def _stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def effective_settings(repository: Path, model_name: str) -> dict[str, Any]:
    """The values the tuned settings have as the repository configures them."""
    server = load_server_settings(repository)
    model = _find(repository, model_name)
    return {
        "parallel_workers": server.parallel_workers,
        "threads_per_worker": model.threads_per_worker,
        "max_batch_size": model.max_batch_size,
        "max_batch_time": model.max_batch_time,
    }


def _find(repository: Path, model_name: str) -> ModelSettings:
    for found in ModelRepository(repository).find_all():
        if found.name == model_name and found.source is not None:
            return found
    raise ValueError(f"no model named {model_name!r} under {repository}")


def _model_folder(repository: Path, model_name: str) -> Path:
    source = _find(repository, model_name).source
    assert source is not None
    return source.parent


def _base_settings(repository: Path) -> dict[str, Any]:
    path = repository / "settings.json"
    settings: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    settings.pop("model_repository_root", None)
    return settings


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
