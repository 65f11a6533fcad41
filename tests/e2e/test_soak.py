"""The soak (``python -m benchmarks soak``), 20,000 requests: memory, file descriptors
and threads of the server and its workers stay flat, every answer is right, and the
server drains and exits 0 on SIGTERM. The million-request run is not for CI (see
benchmarks/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serverproc import server_environment

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 20_000


@pytest.mark.soak
def test_twenty_thousand_mixed_requests_leave_the_server_flat(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    options = ["--requests", str(REQUESTS), "--concurrency", "16", "--workers", "2"]
    command = [sys.executable, "-m", "benchmarks", "soak", *options, "--json-out", str(out)]
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "OK: flat" in done.stdout
    figures = json.loads(out.read_text())
    assert sum(figures["sent"].values()) == REQUESTS
    assert {key.split()[0] for key in figures["sent"]} == {"rest", "grpc"}
    verdict = figures["verdict"]
    assert verdict["ok"] and verdict["failures"] == []
    # The server, each model group's fork parent and its 2 workers, all watched.
    processes = set(verdict["processes"])
    parents = {label for label in processes if label.startswith("fork parent ")}
    workers = {label for label in processes if label.startswith("worker ")}
    assert processes == {"server"} | parents | workers
    assert parents and len(workers) == 2 * len(parents)
    assert verdict["server_exit"]["status"] == 0
