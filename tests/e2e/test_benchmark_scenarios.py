"""Every side-by-side scenario of ``python -m benchmarks`` without a test of its own
in tests/e2e/test_benchmarks.py, run once in its short mode against inferd alone: it
exits 0, writes a figure for every contender of every case, and no answer was wrong.

The short modes: one round of one second, no warm-up, two connections, the fewest
cases and in-process samples the scenario takes (about 10 s each on 2 cores)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common.serverproc import server_environment
from benchmarks.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
BRIEF = ["--rounds", "1", "--duration", "1", "--warmup", "0"]
NO_ASGI = ["--asgi-requests", "0"]
# scenario -> (its short options, the contenders it must report, the load tool it needs)
SHORT: dict[str, tuple[list[str], set[str], str | None]] = {
    "grpc": (["--connections", "2"], {"inferd"}, "h2load"),
    "workers": (
        ["--workers", "2", "--models", "iris", "--ipc-calls", "100"],
        {"inferd pw=2"},
        "wrk",
    ),
    "batching": (["--connections", "2"], {"inferd"}, "wrk"),
    "fairness": (["--connections", "2"], {"inferd"}, "wrk"),
    "overload": (["--queue-sizes", "8", "--times", "3"], {"inferd q=8"}, None),
    "metrics": (["--connections", "2", *NO_ASGI], {"metrics-on", "metrics-off"}, "wrk"),
    "tls": (["--connections", "2"], {"tls-on", "tls-off"}, "wrk"),
    "cache": (["--connections", "2"], {"cache-on", "cache-off"}, "wrk"),
    "tracing": (["--connections", "2", *NO_ASGI], {"tracing-on", "tracing-off"}, "wrk"),
    "mlmodel": (["--connections", "2"], {"inferd"}, "wrk"),
    "sklearn-onnx": (["--connections", "2", "--repeats", "10"], {"iris", "iris-onnx"}, "wrk"),
}


@pytest.mark.parametrize("scenario", sorted(SHORT))
def test_the_scenario_s_short_mode_reports_every_contender(scenario: str, tmp_path: Path) -> None:
    options, contenders, tool = SHORT[scenario]
    if tool is not None and shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    out = tmp_path / f"{scenario}.json"
    only = ["--only", "inferd"] if SCENARIOS[scenario].compares_mlserver else []
    command = [sys.executable, "-m", "benchmarks", scenario, *BRIEF, *options, *only,
               "--json-out", str(out)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert figures["failures"] == []
    labels = {run["label"] for run in figures["runs"]}
    assert labels == contenders, labels
    for run in figures["runs"]:
        assert run["requests"] > 0 and run["requests_per_s"] > 0, run
    assert set(figures["summary"]) == {run["case"] for run in figures["runs"]}


def test_load_on_request_times_cold_and_warm_requests(tmp_path: Path) -> None:
    """Three cold requests (each after an unload), each followed by three warm ones (~5 s)."""
    out = tmp_path / "load-on-request.json"
    command = [sys.executable, "-m", "benchmarks", "load-on-request", "--rounds", "3",
               "--warm", "3", "--json-out", str(out)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cold: " in done.stdout and "(3 requests)" in done.stdout, done.stdout
    assert "warm: " in done.stdout, done.stdout
    figures = json.loads(out.read_text())
    assert figures["setup"]["scenario"] == "load-on-request"
    runs = {run["label"]: run for run in figures["runs"]}
    assert (runs["cold"]["requests"], runs["warm"]["requests"]) == (3, 9)  # 3 per round
    assert 0 < runs["warm"]["p50_ms"] <= runs["warm"]["p99_ms"]


def test_a_command_runs_once_per_tree_with_baseline_src(tmp_path: Path) -> None:
    """stream-path, in process and brief, on this tree and on a baseline (this one
    again): a section per tree, each with its figures (~10 s)."""
    command = [sys.executable, "-m", "benchmarks", "stream-path", "--responses", "20",
               "--calls", "2", "--rounds", "1", "--baseline-src", str(ROOT)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sections = done.stdout.split("== stream-path on the ")[1:]
    assert [section.split(" ")[0] for section in sections] == ["this", "baseline"], done.stdout
    assert all("gRPC ModelStreamInfer" in section for section in sections), done.stdout
