"""benchmarks.mlmodel_path: the MLModel adapter's CPU per request, measured in process."""

from __future__ import annotations

import re

import pytest

from benchmarks.mlmodel_path import measure, measure_worker

PATHS = ("model alone", "native runtime", "MLModel runtime")


def test_it_measures_each_path_per_request(capsys: pytest.CaptureFixture[str]) -> None:
    rows = measure(calls=5, rounds=2)
    assert [row["label"] for row in rows] == [*PATHS, *PATHS]  # --json-out's
    assert all(row["cpu_us_per_request"] > 0 for row in rows)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line in lines:
        figures = dict(re.findall(r"(model alone|native runtime|MLModel runtime)\s+([\d.]+)", line))
        assert set(figures) == set(PATHS)
        assert all(float(value) > 0 for value in figures.values())


@pytest.mark.anyio
async def test_it_measures_both_processes_through_a_worker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = await measure_worker(calls=5, rounds=1)
    assert [row["label"] for row in rows] == [
        "native runtime through a worker",
        "MLModel runtime through a worker",
    ]
    (line,) = capsys.readouterr().out.splitlines()
    pattern = r"(native runtime|MLModel runtime) main\s+([\d.]+) worker\s+([\d.]+)"
    figures = re.findall(pattern, line)
    assert [label for label, _, _ in figures] == ["native runtime", "MLModel runtime"]
    assert all(float(main) > 0 and float(worker) >= 0 for _, main, worker in figures)
