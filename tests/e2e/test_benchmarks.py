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
