"""XGBoostModel: artifacts of both APIs, classifier and regressor, outputs, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_diabetes, load_iris

from inferd.errors import InvalidRequest
from inferd.runtimes.xgboost import XGBoostModel
from inferd.types import Tensor
from tests.frameworks import require_module

from .runtime_helpers import infer, load, model_settings

xgb = require_module("xgboost", "xgboost")

IMPLEMENTATION = "inferd.runtimes.xgboost.XGBoostModel"
IRIS_X, IRIS_Y = load_iris(return_X_y=True)
DIABETES_X, DIABETES_Y = load_diabetes(return_X_y=True)


@pytest.fixture(scope="module")
def classifier() -> Any:
    return xgb.XGBClassifier(n_estimators=5, max_depth=2).fit(IRIS_X, IRIS_Y)


def serve(folder: Path, uri: str | None = None) -> XGBoostModel:
    parameters = {"uri": uri} if uri else {}
    return load(XGBoostModel, model_settings(folder, IMPLEMENTATION, parameters))


@pytest.mark.filterwarnings("ignore:.*Saving model in the UBJSON format")
@pytest.mark.parametrize("filename", ["model.json", "model.ubj", "model.bst"])
def test_classifier_predicts_like_xgboost(tmp_path: Path, classifier: Any, filename: str) -> None:
    classifier.save_model(tmp_path / filename)
    model = serve(tmp_path)
    outputs = infer(model, Tensor("input-0", IRIS_X[:6]), outputs=("predict", "predict_proba"))
    np.testing.assert_array_equal(outputs["predict"][:, 0], classifier.predict(IRIS_X[:6]))
    np.testing.assert_array_equal(outputs["predict_proba"], classifier.predict_proba(IRIS_X[:6]))
    assert list(infer(model, Tensor("input-0", IRIS_X[:2]))) == ["predict"]


def test_booster_api_model_is_a_classifier_by_its_objective(tmp_path: Path) -> None:
    data = xgb.DMatrix(IRIS_X, label=IRIS_Y == 2)
    booster = xgb.train({"objective": "binary:logistic"}, data, num_boost_round=3)
    booster.save_model(tmp_path / "trees.json")
    model = serve(tmp_path, "./trees.json")
    outputs = infer(model, Tensor("x", IRIS_X[95:105]), outputs=("predict", "predict_proba"))
    positive = booster.predict(xgb.DMatrix(IRIS_X[95:105]))
    np.testing.assert_allclose(outputs["predict_proba"][:, 1], positive, rtol=1e-6)
    np.testing.assert_array_equal(outputs["predict"][:, 0], positive > 0.5)
    metadata = model.metadata()
    assert [(t.name, t.datatype, t.shape) for t in metadata.outputs] == [
        ("predict", "INT64", [-1, 1]),
        ("predict_proba", "FP32", [-1, 2]),
    ]


def test_regressor(tmp_path: Path) -> None:
    regressor = xgb.XGBRegressor(n_estimators=5).fit(DIABETES_X, DIABETES_Y)
    regressor.save_model(tmp_path / "model.json")
    model = serve(tmp_path)
    outputs = infer(model, Tensor("x", DIABETES_X[:4].astype(np.float32)))
    np.testing.assert_allclose(outputs["predict"][:, 0], regressor.predict(DIABETES_X[:4]))
    with pytest.raises(InvalidRequest, match=r"no output 'predict_proba'; it offers predict$"):
        infer(model, Tensor("x", DIABETES_X[:4]), outputs=("predict_proba",))
    metadata = model.metadata()
    assert [(t.name, t.datatype, t.shape) for t in metadata.inputs] == [
        ("input-0", "FP32", [-1, 10])
    ]
    assert [(t.name, t.datatype, t.shape) for t in metadata.outputs] == [
        ("predict", "FP32", [-1, 1])
    ]


def test_wrong_feature_count_names_the_expected_shape(tmp_path: Path, classifier: Any) -> None:
    classifier.save_model(tmp_path / "model.json")
    with pytest.raises(
        InvalidRequest, match=r"shape \[2, 3\], but model 'model' expects shape \[-1, 4\]"
    ):
        infer(serve(tmp_path), Tensor("x", IRIS_X[:2, :3]))


def test_dataframe_columns_are_checked_by_name(tmp_path: Path) -> None:
    frame = pd.DataFrame(IRIS_X, columns=["sl", "sw", "pl", "pw"])
    xgb.XGBClassifier(n_estimators=2).fit(frame, IRIS_Y).save_model(tmp_path / "model.json")
    model = serve(tmp_path)
    columns = [Tensor(name, frame[name].to_numpy()[:3]) for name in frame.columns]
    outputs = infer(model, *columns, parameters={"content_type": "pd"})
    assert outputs["predict"].shape == (3, 1)
    renamed = [Tensor(f"c{i}", tensor.data) for i, tensor in enumerate(columns)]
    with pytest.raises(InvalidRequest, match=r"feature_names mismatch"):
        infer(model, *renamed, parameters={"content_type": "pd"})


def test_folder_without_a_model_names_the_files_looked_for(tmp_path: Path) -> None:
    model = XGBoostModel(model_settings(tmp_path, IMPLEMENTATION))
    with pytest.raises(FileNotFoundError, match=r"model\.bst, model\.json, model\.ubj"):
        asyncio.run(model.load())
