"""benchmarks.stream_path: inferd's per-response stream cost, measured in process."""

from __future__ import annotations

import re

import pytest

from benchmarks.stream_path import measure

pytestmark = pytest.mark.anyio


async def test_it_measures_each_path_per_response(capsys: pytest.CaptureFixture[str]) -> None:
    rows = await measure(responses=40, calls=2, rounds=2)
    assert len(rows) == 6 and all(row["us_per_response"] > 0 for row in rows)  # --json-out's
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line in lines:
        figures = dict(
            re.findall(
                r"(model alone|DataPlane\.infer_stream|gRPC ModelStreamInfer)\s+([\d.]+)", line
            )
        )
        assert set(figures) == {"model alone", "DataPlane.infer_stream", "gRPC ModelStreamInfer"}
        assert all(float(value) > 0 for value in figures.values())
