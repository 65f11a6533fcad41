"""`inferd bench` against a real server: a short sweep's table, CSV, JSON and plot;
an open-loop step keeps its rate."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.support.serverproc import ServerProcess

pytest.importorskip("matplotlib")


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd", "bench", "-m", "iris", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_a_short_sweep_writes_table_csv_json_and_plot(
    server: ServerProcess, tmp_path: Path
) -> None:
    result = run_bench(
        *("-u", f"127.0.0.1:{server.http_port}", "-c", "1:4:x2", "-p", "1"),
        *("--measurement-interval", "0.3", "--max-trials", "3"),
        *("--csv", str(tmp_path / "b.csv"), "--json", str(tmp_path / "b.json")),
        *("--plot", str(tmp_path / "b.png")),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["step", "req/s", "p50"]
    assert [line.split()[0] for line in lines[1:]] == ["c=1", "c=2", "c=4"]
    rows = list(csv.DictReader((tmp_path / "b.csv").open()))
    assert [row["concurrency"] for row in rows] == ["1", "2", "4"]
    assert all(float(row["throughput"]) > 0 and row["errors"] == "0" for row in rows)
    # The server's statistics extension gives its compute time per request.
    assert all(float(row["server_compute_us"]) > 0 for row in rows)
    steps = json.loads((tmp_path / "b.json").read_text())
    assert len(steps) == 3 and steps[0]["p99_ms"] >= steps[0]["p50_ms"] > 0
    with Image.open(tmp_path / "b.png") as image:
        assert image.format == "PNG" and image.size[0] > 300


def test_grpc_transport_measures_too(server: ServerProcess) -> None:
    result = run_bench(
        *("-u", server.grpc_address, "-t", "grpc", "-c", "2", "-p", "1"),
        *("--measurement-interval", "0.3", "--max-trials", "3", "--batch-size", "4"),
    )
    assert result.returncode == 0, result.stderr
    [row] = result.stdout.strip().splitlines()[1:]
    assert row.split()[0] == "c=2" and float(row.split()[1]) > 0
    assert row.split()[9] == "0"  # errors


def test_open_loop_keeps_its_rate(server: ServerProcess, tmp_path: Path) -> None:
    result = run_bench(
        *("-u", f"127.0.0.1:{server.http_port}", "-r", "80", "-p", "1"),
        *("--measurement-interval", "1", "--max-trials", "3", "--json", str(tmp_path / "b.json")),
    )
    assert result.returncode == 0, result.stderr
    [step] = json.loads((tmp_path / "b.json").read_text())
    assert step["rate"] == 80
    assert step["errors"] == 0 and step["unsent"] == 0
    assert step["requests"] == 240  # the last 3 windows of 80 requests each, all answered
    assert 72 <= step["throughput"] <= 88


def test_an_unknown_model_is_a_clear_error(server: ServerProcess) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferd",
            "bench",
            "-m",
            "nope",
            "-u",
            f"127.0.0.1:{server.http_port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "inferd bench: GET" in result.stderr and "404" in result.stderr
