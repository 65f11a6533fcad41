"""LightGBMModel: boosters from files, predictions, metadata, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_diabetes, load_iris

from inferd.errors import InvalidRequest
from inferd.runtimes.lightgbm import LightGBMModel
from inferd.types import Tensor
from tests.frameworks import require_module

from .runtime_helpers import infer, load, model_settings

lgb = require_module("lightgbm", "lightgbm")

IMPLEMENTATION = "inferd.runtimes.lightgbm.LightGBMModel"
IRIS_X, IRIS_Y = load_iris(return_X_y=True)
QUIET = {"verbose": -1, "num_iterations": 5}


@pytest.fixture(scope="module")
def multiclass() -> Any:
    params = {"objective": "multiclass", "num_class": 3, **QUIET}
    return lgb.train(params, lgb.Dataset(IRIS_X, IRIS_Y))


def serve(folder: Path, uri: str | None = None) -> LightGBMModel:
    parameters = {"uri": uri} if uri else {}
    return load(LightGBMModel, model_settings(folder, IMPLEMENTATION, parameters))


@pytest.mark.parametrize("filename", ["model.txt", "model.bst"])
def test_multiclass_predicts_like_lightgbm(tmp_path: Path, multiclass: Any, filename: str) -> None:
    multiclass.save_model(str(tmp_path / filename))
    model = serve(tmp_path)
    outputs = infer(model, Tensor("input-0", IRIS_X[:5]))
    np.testing.assert_array_equal(outputs["predict"], multiclass.predict(IRIS_X[:5]))
    metadata = model.metadata()
    assert [(t.name, t.datatype, t.shape) for t in metadata.inputs] == [
        ("input-0", "FP64", [-1, 4])
    ]
    assert [(t.name, t.datatype, t.shape) for t in metadata.outputs] == [
        ("predict", "FP64", [-1, 3])
    ]


def test_regressor_answers_one_column(tmp_path: Path) -> None:
    features, target = load_diabetes(return_X_y=True)
    booster = lgb.train({"objective": "regression", **QUIET}, lgb.Dataset(features, target))
    booster.save_model(str(tmp_path / "diabetes.txt"))
    model = serve(tmp_path, "./diabetes.txt")
    outputs = infer(model, Tensor("x", features[:3].astype(np.float32)))
    np.testing.assert_allclose(outputs["predict"][:, 0], booster.predict(features[:3]), rtol=1e-6)
    assert model.metadata().outputs[0].shape == [-1, 1]


def test_dataframe_input(tmp_path: Path, multiclass: Any) -> None:
    multiclass.save_model(str(tmp_path / "model.txt"))
    columns = [Tensor(f"f{i}", IRIS_X[:3, i]) for i in range(4)]
    outputs = infer(serve(tmp_path), *columns, parameters={"content_type": "pd"})
    expected = multiclass.predict(pd.DataFrame(IRIS_X[:3]))
    np.testing.assert_array_equal(outputs["predict"], expected)


def test_errors(tmp_path: Path, multiclass: Any) -> None:
    multiclass.save_model(str(tmp_path / "model.txt"))
    model = serve(tmp_path)
    with pytest.raises(
        InvalidRequest, match=r"shape \[2, 5\], but model 'model' expects shape \[-1, 4\]"
    ):
        infer(model, Tensor("x", np.zeros((2, 5))))
    with pytest.raises(InvalidRequest, match=r"no output 'predict_proba'; it offers predict"):
        infer(model, Tensor("x", IRIS_X[:2]), outputs=("predict_proba",))


def test_folder_without_a_model(tmp_path: Path) -> None:
    model = LightGBMModel(model_settings(tmp_path, IMPLEMENTATION))
    with pytest.raises(
        FileNotFoundError, match=r"No LightGBM model in folder .*model\.bst, model\.txt"
    ):
        asyncio.run(model.load())
