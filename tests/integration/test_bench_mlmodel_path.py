"""benchmarks.mlmodel_path: the MLModel adapter's CPU per request, measured in process."""

from __future__ import annotations

import re

import pytest

from benchmarks.mlmodel_path import measure

PATHS = ("model alone", "native runtime", "MLModel runtime")


def test_it_measures_each_path_per_request(capsys: pytest.CaptureFixture[str]) -> None:
    measure(calls=5, rounds=2)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line in lines:
        figures = dict(re.findall(r"(model alone|native runtime|MLModel runtime)\s+([\d.]+)", line))
        assert set(figures) == set(PATHS)
        assert all(float(value) > 0 for value in figures.values())
