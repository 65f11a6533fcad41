"""MLflow pyfunc models on a real server: signatures, DataFrames, tensors, params."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pandas as pd

from .runtime_models import IRIS_X, FrameworkModels, grpc_infer, rest_body, rest_infer

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_dataframe_model_answers_like_the_estimator(
    framework_rest: httpx.Client, framework_models: FrameworkModels
) -> None:
    estimator = framework_models.trained["mlflow-iris"]
    frame = pd.DataFrame(IRIS_X[::30], columns=estimator.feature_names_in_)
    columns = {name: frame[name].to_numpy() for name in frame.columns}
    # The signature makes the model's content type 'pd': the request need not say so.
    outputs = rest_infer(framework_rest, "mlflow-iris", columns)
    np.testing.assert_array_equal(outputs["output-1"][:, 0], estimator.predict(frame))


def test_dataframe_model_metadata(framework_rest: httpx.Client) -> None:
    body = framework_rest.get("/v2/models/mlflow-iris").json()
    assert body["parameters"] == {"content_type": "pd"}
    assert [(t["name"], t["datatype"], t["shape"]) for t in body["inputs"]] == [
        (name, "FP64", [-1, 1])
        for name in ("sepal_length", "sepal_width", "petal_length", "petal_width")
    ]
    assert [(t["name"], t["datatype"], t["shape"]) for t in body["outputs"]] == [
        ("output-1", "INT64", [-1])
    ]


def test_missing_column_is_a_400(framework_rest: httpx.Client) -> None:
    body = rest_body({"sepal_length": IRIS_X[:2, 0]})
    response = framework_rest.post("/v2/models/mlflow-iris/infer", json=body)
    assert response.status_code == 400
    assert "petal_width" in response.json()["error"]


def test_tensor_model_with_params_over_rest(framework_rest: httpx.Client) -> None:
    outputs = rest_infer(framework_rest, "mlflow-scale", {"x": X}, parameters={"factor": 3.0})
    np.testing.assert_allclose(outputs["scaled"], X * 3)
    np.testing.assert_allclose(outputs["total"], X.sum(axis=1, keepdims=True) * 3)


def test_tensor_model_over_grpc(framework_grpc: Any) -> None:
    outputs = grpc_infer(framework_grpc, "mlflow-scale", {"x": X})
    np.testing.assert_array_equal(outputs["scaled"], X)


def test_signature_violation_is_a_400(framework_rest: httpx.Client) -> None:
    response = framework_rest.post("/v2/models/mlflow-scale/infer", json=rest_body({"x": X[:, :2]}))
    assert response.status_code == 400
    error = response.json()["error"]
    assert "does not match expected shape (-1, 3)" in error
    assert "x FP32 [-1, 3]" in error
