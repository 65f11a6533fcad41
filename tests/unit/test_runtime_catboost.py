"""CatBoostModel: classifiers (numeric and text labels), regressors, metadata, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris

from inferd.errors import InvalidRequest
from inferd.runtimes.catboost import CatBoostModel
from inferd.types import Tensor
from tests.frameworks import require_module

from .runtime_helpers import infer, load, model_settings

catboost = require_module("catboost", "catboost")

IMPLEMENTATION = "inferd.runtimes.catboost.CatBoostModel"
IRIS_X, IRIS_Y = load_iris(return_X_y=True)
SPECIES = np.array(["setosa", "versicolor", "virginica"])
OPTIONS = {"iterations": 5, "verbose": False, "allow_writing_files": False}


def serve(folder: Path, uri: str | None = None) -> CatBoostModel:
    parameters = {"uri": uri} if uri else {}
    return load(CatBoostModel, model_settings(folder, IMPLEMENTATION, parameters))


def shapes(tensors: list[Any]) -> list[tuple[str, str, list[int], dict[str, Any]]]:
    return [(t.name, t.datatype, t.shape, t.parameters) for t in tensors]


def test_classifier_with_text_labels(tmp_path: Path) -> None:
    classifier = catboost.CatBoostClassifier(**OPTIONS).fit(IRIS_X, SPECIES[IRIS_Y])
    classifier.save_model(str(tmp_path / "model.cbm"))
    model = serve(tmp_path)
    rows = IRIS_X[::30]
    outputs = infer(model, Tensor("input-0", rows), outputs=("predict", "predict_proba"))
    expected = classifier.predict(rows).reshape(-1)
    assert outputs["predict"][:, 0].tolist() == [label.encode() for label in expected]
    np.testing.assert_allclose(outputs["predict_proba"], classifier.predict_proba(rows))
    metadata = model.metadata()
    assert shapes(metadata.inputs) == [("input-0", "FP32", [-1, 4], {})]
    assert shapes(metadata.outputs) == [
        ("predict", "BYTES", [-1, 1], {"content_type": "str"}),
        ("predict_proba", "FP64", [-1, 3], {}),
    ]


def test_binary_classifier_answers_one_label_per_row(tmp_path: Path) -> None:
    classifier = catboost.CatBoostClassifier(**OPTIONS).fit(IRIS_X, IRIS_Y == 1)
    classifier.save_model(str(tmp_path / "churn.bin"))
    outputs = infer(serve(tmp_path), Tensor("x", IRIS_X[45:55]))
    np.testing.assert_array_equal(outputs["predict"][:, 0], classifier.predict(IRIS_X[45:55]))


def test_regressor(tmp_path: Path) -> None:
    features, target = load_diabetes(return_X_y=True)
    regressor = catboost.CatBoostRegressor(**OPTIONS).fit(features, target)
    regressor.save_model(str(tmp_path / "diabetes.cbm"))
    model = serve(tmp_path, "./diabetes.cbm")
    outputs = infer(model, Tensor("x", features[:4]))
    np.testing.assert_allclose(outputs["predict"][:, 0], regressor.predict(features[:4]))
    assert shapes(model.metadata().outputs) == [("predict", "FP64", [-1, 1], {})]
    with pytest.raises(InvalidRequest, match=r"no output 'predict_proba'; it offers predict$"):
        infer(model, Tensor("x", features[:4]), outputs=("predict_proba",))


def test_poisson_regressor_predicts_on_the_exponent_scale(tmp_path: Path) -> None:
    counts = np.round(IRIS_X[:, 0])
    regressor = catboost.CatBoostRegressor(loss_function="Poisson", **OPTIONS)
    regressor.fit(IRIS_X[:, 1:], counts)
    regressor.save_model(str(tmp_path / "model.cbm"))
    outputs = infer(serve(tmp_path), Tensor("x", IRIS_X[:3, 1:]))
    np.testing.assert_allclose(outputs["predict"][:, 0], regressor.predict(IRIS_X[:3, 1:]))


def test_wrong_feature_count(tmp_path: Path) -> None:
    catboost.CatBoostClassifier(**OPTIONS).fit(IRIS_X, IRIS_Y).save_model(
        str(tmp_path / "model.cbm")
    )
    with pytest.raises(
        InvalidRequest, match=r"shape \[1, 3\], but model 'model' expects shape \[-1, 4\]"
    ):
        infer(serve(tmp_path), Tensor("x", IRIS_X[:1, :3]))
