"""The two models the scale benchmark serves, and one request for each.

``light``: the iris LogisticRegression (a fraction of a millisecond per call), where
a server's protocol work (parsing, encoding) is most of the cost. ``heavy``: a
RandomForest whose ``predict`` takes about 10 ms here (200 trees, one job), where
the model is. Both are trained here, deterministically, and served by the sklearn
runtime; each request is one FP32 row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

from tests.support.models import train_iris

from ..repository import ROW, predict_ms, predicted_class, v2_request, write_sklearn_model

HEAVY_FEATURES = 20
HEAVY_DEPTH = 12
HEAVY_SAMPLES = 2000  # the predict time comes from the trees, not from the data's size


@dataclass(frozen=True)
class ScaleModel:
    name: str  # in the repository and the URLs: "light" or "heavy"
    title: str
    estimator: Any
    row: tuple[float, ...]
    expected: int  # the class its row must get
    predict_ms: float  # CPU milliseconds of one row's predict, in this process

    def describe(self) -> str:
        return f"{self.name}: {self.title} ({self.predict_ms:.2f} ms of CPU per predict)"

    def rest_body(self) -> bytes:
        return json.dumps(v2_request([self.row]), separators=(",", ":")).encode()

    def grpc_message(self) -> bytes:
        """A serialized ModelInferRequest with the row as typed FP32 contents."""
        from inferd.protocol import pb

        request = pb.ModelInferRequest(model_name=self.name)
        tensor = request.inputs.add(name="input-0", datatype="FP32", shape=[1, len(self.row)])
        tensor.contents.fp32_contents.extend(self.row)
        message: bytes = request.SerializeToString()
        return message

    def write(self, repo: Path) -> None:
        write_sklearn_model(repo, self.name, self.estimator)


def light_model() -> ScaleModel:
    estimator = train_iris()
    return _model("light", "iris LogisticRegression", estimator, ROW)


def heavy_model(trees: int) -> ScaleModel:
    features, target = make_classification(
        n_samples=HEAVY_SAMPLES,
        n_features=HEAVY_FEATURES,
        n_informative=10,
        n_redundant=4,
        random_state=0,
    )
    features = features.astype(np.float32)
    estimator = RandomForestClassifier(
        n_estimators=trees, max_depth=HEAVY_DEPTH, n_jobs=-1, random_state=0
    ).fit(features, target)
    estimator.set_params(n_jobs=1)  # one request, one core: the servers bring the parallelism
    row = [round(float(value), 4) for value in features[0]]
    return _model("heavy", f"RandomForest {trees} trees", estimator, row)


def build_models(names: Sequence[str], heavy_trees: int) -> list[ScaleModel]:
    return [light_model() if name == "light" else heavy_model(heavy_trees) for name in names]


def _model(name: str, title: str, estimator: Any, row: Sequence[float]) -> ScaleModel:
    values = tuple(float(value) for value in row)
    expected = predicted_class(estimator, values)
    return ScaleModel(name, title, estimator, values, expected, predict_ms(estimator, values))
