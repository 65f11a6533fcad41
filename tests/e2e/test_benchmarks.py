"""``python -m benchmarks`` end to end: the rest scenario, briefly, against inferd alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serverproc import server_environment

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_the_rest_scenario_measures_inferd_and_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "rest.json"
    brief = ["--rounds", "1", "--duration", "1", "--warmup", "0", "--connections", "2"]
    options = ["--only", "inferd", *brief, "--json-out", str(out)]
    command = [sys.executable, "-m", "benchmarks", "rest", *options]
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "c2 (medians over rounds):" in done.stdout
    figures = json.loads(out.read_text())
    (run,) = figures["runs"]
    assert (run["label"], run["case"], run["errors"]) == ("inferd", "c2", 0)
    assert run["requests"] > 0 and run["requests_per_s"] > 0
    assert figures["summary"]["c2"]["inferd"]["runs"] == 1
    assert figures["failures"] == []


def test_the_shm_scenario_compares_the_three_ways_to_send_a_tensor(tmp_path: Path) -> None:
    """Shared memory, binary HTTP and raw gRPC, each checked and measured once (1 MiB)."""
    out = tmp_path / "shm.json"
    brief = ["--rounds", "1", "--duration", "1", "--warmup", "0", "--sizes-mib", "1"]
    command = [sys.executable, "-m", "benchmarks", "shm", *brief, "--json-out", str(out)]
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    runs = {run["label"]: run for run in figures["runs"]}
    assert set(runs) == {"shm", "http-binary", "grpc-raw"}
    assert all(run["requests"] > 0 and run["errors"] == 0 for run in runs.values())
    assert set(figures["summary"]["1MiB c1"]) == set(runs)
    assert "shm/http-binary: req/s x" in done.stdout
    assert figures["failures"] == []


@pytest.mark.skipif(
    shutil.which("wrk") is None or shutil.which("h2load") is None,
    reason="wrk or h2load (nghttp2-client) is not installed",
)
def test_the_scale_command_measures_two_replicas_over_both_protocols(tmp_path: Path) -> None:
    """Two independent servers at once, each answer checked, their CPU read (~15 s)."""
    out = tmp_path / "scale.json"
    brief = ["--models", "light", "--workers", "--replicas", "2", "--duration", "1"]
    command = [sys.executable, "-m", "benchmarks", "scale", *brief, "--warmup", "0",
               "--json-out", str(out)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    windows = {window["protocol"]: window for window in figures["windows"]}
    assert set(windows) == {"rest", "grpc"} and figures["failures"] == []
    for window in windows.values():
        assert (window["layout"], window["errors"], len(window["per_server"])) == ("2 x 0", 0, 2)
        assert all(server["requests"] > 0 for server in window["per_server"])
        assert window["cores_busy"] > 0 and 0 < window["main_share"] <= 1.5
    assert "| 2 x 0 (replicas) | **" in done.stdout
