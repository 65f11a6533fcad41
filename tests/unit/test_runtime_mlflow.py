"""MLflowModel: signatures, DataFrame and tensor inputs, params, metadata, errors."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_iris

from inferd.errors import InvalidRequest
from inferd.runtimes.mlflow import MLflowModel
from inferd.types import Tensor
from tests.frameworks import require_module, save_mlflow_frame_model, save_mlflow_tensor_model

from .runtime_helpers import infer, load, model_settings

mlflow = require_module("mlflow", "mlflow")

IMPLEMENTATION = "inferd.runtimes.mlflow.MLflowModel"
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def serve(folder: Path, uri: str = "./model") -> MLflowModel:
    return load(MLflowModel, model_settings(folder, IMPLEMENTATION, {"uri": uri}))


@pytest.fixture(scope="module")
def tensor_model(tmp_path_factory: pytest.TempPathFactory) -> MLflowModel:
    folder = tmp_path_factory.mktemp("tensor")
    save_mlflow_tensor_model(folder / "model")
    return serve(folder)


@pytest.fixture(scope="module")
def frame_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[MLflowModel, Any]:
    folder = tmp_path_factory.mktemp("frame")
    estimator = save_mlflow_frame_model(folder / "model")
    return serve(folder), estimator


def described(tensors: list[Any]) -> list[tuple[str, str, list[int], dict[str, Any]]]:
    return [(t.name, t.datatype, t.shape, t.parameters) for t in tensors]


def test_named_tensors_and_params(tensor_model: MLflowModel) -> None:
    outputs = infer(tensor_model, Tensor("x", X), parameters={"factor": 2.0, "other": 1})
    np.testing.assert_array_equal(outputs["scaled"], X * 2)
    np.testing.assert_array_equal(outputs["total"], X.sum(axis=1, keepdims=True) * 2)
    # Without the parameter, the signature's default applies.
    np.testing.assert_array_equal(infer(tensor_model, Tensor("x", X))["scaled"], X)


def test_tensors_are_cast_to_the_signature_dtype(tensor_model: MLflowModel) -> None:
    outputs = infer(tensor_model, Tensor("x", X.astype(np.float64)))
    assert outputs["scaled"].dtype == np.float32


def test_tensor_metadata(tensor_model: MLflowModel) -> None:
    metadata = tensor_model.metadata()
    numpy = {"content_type": "np"}
    assert described(metadata.inputs) == [("x", "FP32", [-1, 3], numpy)]
    assert described(metadata.outputs) == [
        ("scaled", "FP32", [-1, 3], numpy),
        ("total", "FP32", [-1, 1], numpy),
    ]
    assert metadata.parameters == {"content_type": "dict"}


def test_signature_violations_are_a_400(tensor_model: MLflowModel) -> None:
    with pytest.raises(InvalidRequest, match=r"does not match expected shape \(-1, 3\).*x FP32"):
        infer(tensor_model, Tensor("x", X[:, :2]))
    with pytest.raises(InvalidRequest, match=r"'factor'"):
        infer(tensor_model, Tensor("x", X), parameters={"factor": "large"})


def test_dataframe_model(frame_model: tuple[MLflowModel, Any]) -> None:
    model, estimator = frame_model
    frame = pd.DataFrame(load_iris().data[::50], columns=estimator.feature_names_in_)
    columns = [Tensor(name, frame[name].to_numpy()) for name in frame.columns]
    # The signature makes 'pd' the default: the request need not say it.
    outputs = infer(model, *columns)
    np.testing.assert_array_equal(outputs["output-1"][:, 0], estimator.predict(frame))
    metadata = model.metadata()
    assert metadata.parameters == {"content_type": "pd"}
    assert described(metadata.inputs)[0] == (
        "sepal_length",
        "FP64",
        [-1, 1],
        {"content_type": "np"},
    )
    assert [t.name for t in metadata.outputs] == ["output-1"]
    with pytest.raises(InvalidRequest, match=r"petal_width"):
        infer(model, *columns[:3])


def test_missing_flavor_package_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_mlflow_frame_model(tmp_path / "model")
    monkeypatch.setitem(sys.modules, "sklearn", None)  # makes `import sklearn` fail
    monkeypatch.delitem(sys.modules, "mlflow.sklearn", raising=False)
    with pytest.raises(
        ModuleNotFoundError, match=r"needs the Python package 'sklearn'.*requirements"
    ):
        serve(tmp_path)


def test_folder_without_mlmodel(tmp_path: Path) -> None:
    model = MLflowModel(model_settings(tmp_path, IMPLEMENTATION))
    with pytest.raises(FileNotFoundError, match=r"no MLmodel file"):
        asyncio.run(model.load())
