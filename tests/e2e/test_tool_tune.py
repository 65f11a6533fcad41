"""`inferd tune` on the example iris model with a small budget."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.support.models import train_iris

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("matplotlib")


def test_tune_reports_settings_that_beat_the_defaults_or_says_none_did(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    shutil.copytree(ROOT / "examples" / "models" / "sklearn-iris", repository / "sklearn-iris")
    train_iris(repository / "sklearn-iris" / "model.joblib")
    result = subprocess.run(
        [
            *(sys.executable, "-m", "inferd", "tune", str(repository), "-m", "sklearn-iris"),
            *("--p99-ms", "200", "--budget-s", "25", "-c", "1,4"),
            *("--workers", "2", "--threads", "", "--batch-sizes", "8", "--batch-times", "0.002"),
            *("--measurement-interval", "0.3", "--plot", str(tmp_path / "tune.png")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["candidate", "req/s", "conc", "p99", "ms"]
    assert lines[1].startswith("defaults ")
    assert "defaults: parallel_workers=1, threads_per_worker=1" in result.stderr  # progress
    assert "[    0 s] defaults ..." in result.stderr
    assert "phase parallel_workers, from: parallel_workers=1" in result.stderr
    defaults = float(lines[1][64:].split()[0])
    assert defaults > 0
    if any(line.startswith("Best within p99 <= 200 ms") for line in lines):
        best = next(line for line in lines if line.startswith("Best within"))
        measured = float(best.split(" -- ")[1].split()[0])
        assert measured > defaults * 1.05
        server = json.loads(
            next(x for x in lines if x.startswith("settings.json:")).split(": ", 1)[1]
        )
        model = json.loads(
            next(x for x in lines if x.startswith("model-settings.json:")).split(": ", 1)[1]
        )
        assert server or model
        assert set(server) <= {"parallel_workers"}
        assert set(model) <= {"threads_per_worker", "max_batch_size", "max_batch_time"}
    else:
        assert any(line.startswith("No candidate beat the defaults") for line in lines)
    assert lines[-1].startswith("Tuning took")
    with Image.open(tmp_path / "tune.png") as image:
        assert image.format == "PNG"
