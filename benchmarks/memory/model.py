"""The model every server loads: a RandomForest trained here, deterministically.

Issue 26's model: 60 trees grown to full depth on 40,000 rows of 20 features
(about 21 MiB as joblib), whose trees live in numpy arrays, the memory that
workers sharing one copy would save. It is written once as joblib and copied
into each run's repository under the implementation that server loads; each
request is one FP32 row whose class is known.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

from benchmarks.common.models import write_model_folder

from ..repository import MODEL_FILE, predict_ms, predicted_class, v2_request
from ..scenarios.base import VerificationError

MODEL_NAME = "forest"
FEATURES = 20


@dataclass(frozen=True)
class ForestModel:
    """The trained forest, saved at ``path``, and the request it must answer."""

    trees: int
    rows: int
    path: Path  # the joblib file every repository copies
    row: tuple[float, ...]
    expected: int  # the class of ``row``
    predict_ms: float  # CPU ms of one row's predict in this process, one job
    file_mib: float  # the joblib file's size

    def describe(self) -> str:
        return (
            f"RandomForest, {self.trees} trees on {self.rows:,} rows of {FEATURES} features: "
            f"{self.file_mib:.1f} MiB as joblib, {self.predict_ms:.1f} ms of CPU per predict"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "trees": self.trees,
            "rows": self.rows,
            "features": FEATURES,
            "joblib_mib": round(self.file_mib, 2),
            "predict_ms": round(self.predict_ms, 3),
            "expected_class": self.expected,
        }

    def write(self, repo: Path, implementation: str) -> None:
        """``repo/forest``: the model file and its model-settings.json."""
        parameters = {"uri": f"./{MODEL_FILE}"}
        files = {MODEL_FILE: self.path}
        write_model_folder(repo, MODEL_NAME, implementation, files=files, parameters=parameters)

    def request_body(self) -> bytes:
        return json.dumps(v2_request([self.row]), separators=(",", ":")).encode()

    def check(self, status: int, body: bytes) -> None:
        """VerificationError unless the answer is a 200 giving ``row`` its class."""
        if status != 200 or answered_classes(body) != [self.expected]:
            raise VerificationError(
                f"{MODEL_NAME}: expected HTTP 200 and class [{self.expected}], got "
                f"HTTP {status}: {body[:300]!r}"
            )


def answered_classes(body: bytes) -> list[int] | None:
    """The first output's data as ints; None when the answer holds none."""
    try:
        return [int(value) for value in json.loads(body)["outputs"][0]["data"]]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def train_forest(trees: int, rows: int, folder: Path) -> ForestModel:
    """Train the forest, save it under ``folder``, and time one row's predict."""
    features, target = make_classification(
        n_samples=rows, n_features=FEATURES, n_informative=10, n_redundant=4, random_state=0
    )
    features = features.astype(np.float32)
    forest = RandomForestClassifier(n_estimators=trees, n_jobs=-1, random_state=0)
    forest.fit(features, target)
    forest.set_params(n_jobs=1)  # one request, one core: the workers bring the parallelism
    row = tuple(round(float(value), 4) for value in features[0])
    path = folder / MODEL_FILE
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump(forest, path)
    expected, cpu_ms = predicted_class(forest, row), predict_ms(forest, row)
    return ForestModel(trees, rows, path, row, expected, cpu_ms, path.stat().st_size / 2**20)
