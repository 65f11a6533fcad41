"""The models the scale benchmark serves, and one request for each.

``light``: the iris LogisticRegression (a fraction of a millisecond per call), where
a server's protocol work (parsing, encoding) is most of the cost. ``heavy``: a
RandomForest whose ``predict`` takes about 10 ms here (200 trees, one job), where
the model is. Both are trained here, deterministically, and served by the sklearn
runtime. ``mlp``: issue 27's GPU MLP stood in for on CPUs (``mlp.py``): a row of
2048 numbers, adaptive batching, a device that costs mostly per call. Each request
is one FP32 row; each model writes its own folder and knows the answer its row gets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

from benchmarks.common.models import train_iris

from ..repository import ROW, predict_ms, predicted_class, v2_request, write_sklearn_model
from .mlp import mlp_answer, mlp_row, write_mlp_model

HEAVY_FEATURES = 20
HEAVY_DEPTH = 12
HEAVY_SAMPLES = 2000  # the predict time comes from the trees, not from the data's size

# (repository, device lock) -> the model's folder written in the repository. The lock
# file stands for the machine's one device: only device-like models use it.
Writer = Callable[[Path, Path], object]


@dataclass(frozen=True)
class ScaleModel:
    name: str  # in the repository and the URLs: "light", "heavy" or "mlp"
    title: str
    row: tuple[float, ...]
    expected: tuple[float, ...]  # the first output of the row's answer, flattened
    predict_ms: float  # one row's predict: CPU ms in this process, or the device's ms
    writer: Writer = field(repr=False, compare=False)
    cost: str = "of CPU"  # what predict_ms measures

    def describe(self) -> str:
        return f"{self.name}: {self.title} ({self.predict_ms:.2f} ms {self.cost} per predict)"

    def matches(self, values: Sequence[float]) -> bool:
        """Whether an answer's first output is the expected one (FP32 decimals: close)."""
        return len(values) == len(self.expected) and bool(
            np.allclose(values, self.expected, rtol=1e-6, atol=0.0)
        )

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

    def write(self, repo: Path, device_lock: Path) -> None:
        self.writer(repo, device_lock)


def light_model() -> ScaleModel:
    estimator = train_iris()
    return _sklearn_model("light", "iris LogisticRegression", estimator, ROW)


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
    return _sklearn_model("heavy", f"RandomForest {trees} trees", estimator, row)


def mlp_model(call_ms: float, row_ms: float) -> ScaleModel:
    """The GPU-like MLP: ``call_ms`` per call plus ``row_ms`` per row on one device."""
    title = (
        f"GPU-like MLP, 2048 FP32 in, {call_ms:g} ms per call + {row_ms:g} ms per row "
        "on one device, batches of up to 32 within 2 ms"
    )

    def write(repo: Path, device_lock: Path) -> None:
        write_mlp_model(repo, "mlp", call_ms, row_ms, device_lock)

    row = mlp_row()
    return ScaleModel("mlp", title, row, mlp_answer(row), call_ms + row_ms, write, "on the device")


def build_models(
    names: Sequence[str], heavy_trees: int, mlp_call_ms: float = 1.0, mlp_row_ms: float = 0.02
) -> list[ScaleModel]:
    build: dict[str, Callable[[], ScaleModel]] = {
        "light": light_model,
        "heavy": lambda: heavy_model(heavy_trees),
        "mlp": lambda: mlp_model(mlp_call_ms, mlp_row_ms),
    }
    return [build[name]() for name in names]


def _sklearn_model(name: str, title: str, estimator: Any, row: Sequence[float]) -> ScaleModel:
    values = tuple(float(value) for value in row)
    expected = (float(predicted_class(estimator, values)),)

    def write(repo: Path, _device_lock: Path) -> None:
        write_sklearn_model(repo, name, estimator)

    return ScaleModel(name, title, values, expected, predict_ms(estimator, values), write)
