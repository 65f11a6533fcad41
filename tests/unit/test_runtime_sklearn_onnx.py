"""accelerate: "onnx" for SKLearnModel: conversion, the agreement check, fallbacks."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from inferd.errors import InvalidRequest
from inferd.runtimes import sklearn_onnx
from inferd.runtimes.sklearn import SKLearnModel
from inferd.types import Tensor
from tests.frameworks import require_module
from tests.support.models import train_iris

from .runtime_helpers import infer, load, model_settings

require_module("skl2onnx", "onnx")
require_module("onnxruntime", "onnx")

IMPLEMENTATION = "inferd.runtimes.sklearn.SKLearnModel"
IRIS_X, IRIS_Y = load_iris(return_X_y=True)
SPECIES = np.array(["setosa", "versicolor", "virginica"])


def serve(folder: Path, estimator: Any, **extra: Any) -> SKLearnModel:
    joblib.dump(estimator, folder / "model.joblib")
    parameters = {"extra": {"accelerate": "onnx", **extra}}
    return load(SKLearnModel, model_settings(folder, IMPLEMENTATION, parameters))


def test_classifier_is_served_by_onnx_runtime_with_sklearn_dtypes(tmp_path: Path) -> None:
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    pipeline.fit(IRIS_X, SPECIES[IRIS_Y])
    model = serve(tmp_path, pipeline)
    assert model._accelerator is not None
    assert model._accelerator.methods == ("predict", "predict_proba")
    outputs = infer(model, Tensor("x", IRIS_X[::10]), outputs=("predict", "predict_proba"))
    assert outputs["predict"][:, 0].tolist() == [s.encode() for s in pipeline.predict(IRIS_X[::10])]
    assert outputs["predict_proba"].dtype == np.float64
    np.testing.assert_allclose(
        outputs["predict_proba"], pipeline.predict_proba(IRIS_X[::10]), rtol=1e-3, atol=1e-5
    )


def test_regressor(tmp_path: Path) -> None:
    features, target = load_diabetes(return_X_y=True)
    regressor = LinearRegression().fit(features, target)
    model = serve(tmp_path, regressor)
    assert model._accelerator is not None
    outputs = infer(model, Tensor("x", features[:5]))
    assert outputs["predict"].shape == (5, 1)
    np.testing.assert_allclose(outputs["predict"][:, 0], regressor.predict(features[:5]), rtol=1e-4)


def test_methods_onnx_does_not_serve_go_to_sklearn(tmp_path: Path) -> None:
    classifier = train_iris()
    model = serve(tmp_path, classifier, predict_fn="decision_function")
    assert model._accelerator is not None
    outputs = infer(model, Tensor("x", IRIS_X[:3]))
    np.testing.assert_array_equal(
        outputs["decision_function"], classifier.decision_function(IRIS_X[:3])
    )


def test_nan_gets_sklearns_answer(tmp_path: Path) -> None:
    model = serve(tmp_path, train_iris())
    rows = IRIS_X[:2].copy()
    rows[0, 1] = np.nan
    with pytest.raises(InvalidRequest, match=r"NaN"):
        infer(model, Tensor("x", rows))


def test_unconvertible_estimator_falls_back_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = make_pipeline(FunctionTransformer(np.abs), LogisticRegression(max_iter=1000))
    pipeline.fit(IRIS_X, IRIS_Y)
    with caplog.at_level(logging.WARNING):
        model = serve(tmp_path, pipeline)
    assert model._accelerator is None
    assert "accelerate 'onnx' is off, scikit-learn serves the model" in caplog.text
    assert "FunctionTransformer" in caplog.text
    outputs = infer(model, Tensor("x", IRIS_X[:3]))
    np.testing.assert_array_equal(outputs["predict"][:, 0], pipeline.predict(IRIS_X[:3]))


def test_disagreement_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_run = sklearn_onnx.OnnxAccelerator.run

    def off_by_a_bit(self: Any, methods: tuple[str, ...], features: Any) -> Any:
        results = real_run(self, methods, features)
        return {**results, "predict_proba": results["predict_proba"] + 0.01}

    monkeypatch.setattr(sklearn_onnx.OnnxAccelerator, "run", off_by_a_bit)
    with caplog.at_level(logging.WARNING):
        model = serve(tmp_path, train_iris())
    assert model._accelerator is None
    assert "predict_proba differs from scikit-learn by up to 0.01" in caplog.text


def test_estimator_fit_on_a_dataframe_is_not_converted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    frame, labels = load_iris(return_X_y=True, as_frame=True)
    with caplog.at_level(logging.WARNING):
        model = serve(tmp_path, LogisticRegression(max_iter=1000).fit(frame, labels))
    assert model._accelerator is None
    assert "fit on a numeric array" in caplog.text


def test_unknown_accelerator_fails_the_load(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"accelerate is 'tensorrt'; the one accelerator is 'onnx'"
    ):
        serve(tmp_path, LinearRegression().fit(IRIS_X, IRIS_Y), accelerate="tensorrt")
