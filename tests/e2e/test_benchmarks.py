"""``python -m benchmarks`` end to end, briefly: the rest, grpc-floor, shm, openai and
composition scenarios against inferd alone, the scale and memory commands (memory beside
MLServer too where its venv has mlserver-sklearn), host-ceiling and process-cpu. The
other scenarios' short modes: tests/e2e/test_benchmark_scenarios.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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


@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load (nghttp2-client) is missing")
def test_the_grpc_floor_scenario_measures_inferd_beside_grpcio_alone(tmp_path: Path) -> None:
    """The unary floor (grpcio alone) and inferd, each answer checked, CPU per call read."""
    out = tmp_path / "grpc-floor.json"
    brief = ["--rounds", "1", "--duration", "1", "--warmup", "0", "--connections", "2"]
    command = [sys.executable, "-m", "benchmarks", "grpc-floor", *brief, "--no-default",
               "--json-out", str(out)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    runs = {run["label"]: run for run in figures["runs"]}
    assert set(runs) == {"floor", "inferd"} and figures["failures"] == []
    for run in runs.values():
        assert run["requests"] > 0 and run["errors"] == 0 and run["cpu_us_per_request"] > 0
    assert "inferd/floor: req/s x" in done.stdout


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


def run_memory(tmp_path: Path, *servers: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    out = tmp_path / "memory.json"
    brief = ["--workers", "1", "2", "--trees", "10", "--rows", "5000", "--requests", "4"]
    command = [sys.executable, "-m", "benchmarks", "memory", *brief, *servers,
               "--json-out", str(out)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done, json.loads(out.read_text())


MLSERVER_PYTHON = os.environ.get("INFERD_BENCH_MLSERVER_PYTHON")


def lacks_mlserver_sklearn(python: str) -> bool:
    check = [python, "-c", "import mlserver_sklearn"]
    return subprocess.run(check, capture_output=True, timeout=120).returncode != 0


def test_the_memory_command_reads_the_pss_of_each_servers_workers(tmp_path: Path) -> None:
    """parallel_workers 1 and 2: READY timed, answers checked, every worker's PSS (~10 s);
    the same folder on MLServer 1.7.1 in the same run where its venv is there (~25 s
    more: one run for both, as a user runs it)."""
    with_mlserver = MLSERVER_PYTHON is not None and not lacks_mlserver_sklearn(MLSERVER_PYTHON)
    servers = ["--mlserver-python", str(MLSERVER_PYTHON)] if with_mlserver else ["--only", "inferd"]
    done, figures = run_memory(tmp_path, *servers)
    assert figures["failures"] == []
    runs = {run["workers"]: run for run in figures["runs"] if run["server"] == "inferd"}
    assert set(runs) == {1, 2}
    for workers, run in runs.items():
        assert run["answers"] == 4 * workers
        assert 0 < run["ready_s"] < 120 and run["pss_mib"] > 0
        assert run["processes"] >= workers + 1  # the server and its workers at least
        assert all(p["pss_kib"] > 0 for p in run["served"]["processes"])
    assert runs[2]["pss_mib"] > runs[1]["pss_mib"]  # a second worker holds something
    one, two = figures["summary"]["inferd"]
    assert two["per_added_worker_mib"] == pytest.approx(two["pss_mib"] - one["pss_mib"], abs=0.1)
    assert "| 2 | " in done.stdout and "inferd +MiB/worker" in figures["markdown"]
    if not with_mlserver:
        return
    assert set(figures["summary"]) == {"inferd", "mlserver"}
    ml_runs = [run for run in figures["runs"] if run["server"] == "mlserver"]
    assert sorted(run["workers"] for run in ml_runs) == [1, 2]
    assert all(run["processes"] >= run["workers"] + 1 for run in ml_runs)


def test_host_ceiling_loads_the_model_host_and_checks_every_answer(tmp_path: Path) -> None:
    """Pre-packed requests straight to the model host's socket (~10 s): answered, right."""
    out = tmp_path / "host-ceiling.json"
    command = [sys.executable, "-m", "benchmarks", "host-ceiling", "--duration", "1",
               "--warmup", "0.5", "--in-flight", "8", "--json-out", str(out)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert "wrong answers 0;" in line, line
    assert int(line.split()[2].replace(",", "")) > 0, line  # "model host: N req/s ..."
    (run,) = json.loads(out.read_text())["runs"]
    assert run["label"] == "model host" and run["requests_per_s"] > 0 and run["wrong"] == 0


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_process_cpu_says_what_each_process_spent_per_request(tmp_path: Path) -> None:
    """One brief window (~10 s): the protocol processes, the host and its worker."""
    results = tmp_path / "process-cpu.json"
    command = [sys.executable, "-m", "benchmarks", "process-cpu", "--duration", "1",
               "--warmup", "1", "--workers", "1", "--connections", "4",
               "--json-out", str(results)]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "round 1, this tree: " in out and " req/s, mean batch " in out, out
    for process in ("protocol process 0", "protocol process 1", "model host", "worker "):
        assert f"us/req  {process}" in out, out
    (run,) = json.loads(results.read_text())["runs"]
    assert (run["label"], run["round"]) == ("this tree", 1) and run["requests_per_s"] > 0
    assert any(name.startswith("model host") for name in run["cpu_us_per_request"])


def test_the_openai_scenario_streams_chat_completions_from_inferd(tmp_path: Path) -> None:
    """1 then 2 concurrent chat streams from the tiny LM for a second each, on one server
    start (--start-once), every stream checked (LitServe and vLLM left out: CI has neither
    venv), then the open-loop load (--request-rate) with goodput."""
    pytest.importorskip("transformers")
    out = tmp_path / "openai.json"
    openai = [sys.executable, "-m", "benchmarks", "openai", "--json-out", str(out)]
    brief = ["--rounds", "1", "--duration", "1", "--warmup", "0"]
    env = server_environment()
    env.pop("INFERD_BENCH_LITSERVE_PYTHON", None)
    env.pop("INFERD_BENCH_VLLM_PYTHON", None)
    once = [*openai, *brief, "--connections", "1", "2", "--start-once"]
    done = subprocess.run(once, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    runs = {run["case"]: run for run in figures["runs"]}
    assert set(runs) == {"c1", "c2"} and figures["failures"] == []
    assert runs["c1"]["startup_s"] == runs["c2"]["startup_s"]  # one start for both loads
    assert "inferd round 0, started once for 2 loads:" in done.stdout, done.stdout
    run = runs["c2"]
    assert (run["label"], run["unit"], run["errors"]) == ("inferd", "tok", 0)
    assert run["streams"] > 0 and run["requests"] >= run["streams"]
    assert 0 < run["p50_ms"] <= run["max_ms"]  # time to first token
    assert 0 <= run["goodput_per_s"] <= run["streams"] / run["duration_s"] + 1e-9
    assert "c2 (medians over rounds):" in done.stdout and "goodput" in done.stdout
    # Open-loop: streams arriving at random, 8 a second, at most 4 at once; the server in
    # this command's session.
    open_loop = [*openai, *brief, "--connections", "4", "--request-rate", "8", "--shared-session"]
    done = subprocess.run(open_loop, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads(out.read_text())["runs"][0]
    assert run["errors"] == 0 and 0 < run["streams"] <= 8 * 3, run  # a second of arrivals
    assert "chat streams at 8/s, at most 4 at once" in done.stdout, done.stdout
    assert "servers in this command's session" in done.stdout


def test_the_composition_scenario_measures_bls_and_an_ensemble(tmp_path: Path) -> None:
    """add_sub direct, through BLS, two steps of an ensemble, two client calls: each
    answer checked, each way measured once."""
    out = tmp_path / "composition.json"
    brief = ["--rounds", "1", "--duration", "1", "--warmup", "0"]
    command = [sys.executable, "-m", "benchmarks", "composition", *brief, "--json-out", str(out)]
    done = subprocess.run(
        command, cwd=ROOT, env=server_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    runs = {run["label"]: run for run in figures["runs"]}
    assert set(runs) == {"direct", "bls", "ensemble", "client-two"}
    assert all(run["requests"] > 0 and run["errors"] == 0 for run in runs.values())
    assert "bls/direct: req/s x" in done.stdout and "ensemble/client-two: req/s x" in done.stdout
    assert figures["failures"] == []
