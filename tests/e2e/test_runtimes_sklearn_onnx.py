"""accelerate: "onnx" on a real server: same answers and datatypes as scikit-learn,
and a model that cannot be converted is still served, by scikit-learn."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np

from tests.support.serverproc import ServerProcess

from .runtime_models import IRIS_X, FrameworkModels, grpc_infer, metadata_tensors, rest_body

BOTH = ("predict", "predict_proba")


def test_accelerated_model_answers_like_sklearn(
    framework_rest: httpx.Client, framework_models: FrameworkModels
) -> None:
    estimator = framework_models.trained["iris-onnx"]
    response = framework_rest.post(
        "/v2/models/iris-onnx/infer", json=rest_body({"input-0": IRIS_X[::10]}, outputs=BOTH)
    )
    assert response.status_code == 200, response.text
    predict, proba = response.json()["outputs"]
    # Same datatypes as plain scikit-learn: INT64 labels, FP64 probabilities.
    assert (predict["datatype"], proba["datatype"]) == ("INT64", "FP64")
    assert predict["data"] == estimator.predict(IRIS_X[::10]).tolist()
    np.testing.assert_allclose(
        np.reshape(proba["data"], proba["shape"]),
        estimator.predict_proba(IRIS_X[::10]),
        rtol=1e-3,
        atol=1e-6,
    )


def test_accelerated_model_over_grpc(
    framework_grpc: Any, framework_models: FrameworkModels
) -> None:
    estimator = framework_models.trained["iris-onnx"]
    outputs = grpc_infer(framework_grpc, "iris-onnx", {"input-0": IRIS_X[:5]}, outputs=BOTH)
    np.testing.assert_array_equal(outputs["predict"][:, 0], estimator.predict(IRIS_X[:5]))


def test_metadata_and_wrong_width(framework_rest: httpx.Client) -> None:
    assert metadata_tensors(framework_rest, "iris-onnx")["inputs"] == [("input-0", "FP64", [-1, 4])]
    response = framework_rest.post(
        "/v2/models/iris-onnx/infer", json=rest_body({"input-0": IRIS_X[:1, :3]})
    )
    assert response.status_code == 400
    assert "expects shape [-1, 4] (4 features per row)" in response.json()["error"]


def test_unconvertible_model_falls_back_to_sklearn(
    framework_rest: httpx.Client,
    framework_models: FrameworkModels,
    framework_server: ServerProcess,
) -> None:
    estimator = framework_models.trained["iris-onnx-fallback"]
    response = framework_rest.post(
        "/v2/models/iris-onnx-fallback/infer", json=rest_body({"input-0": IRIS_X[::30]})
    )
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == estimator.predict(IRIS_X[::30]).tolist()
    log = framework_server.log()
    assert "Model 'iris-onnx-fallback': accelerate 'onnx' is off" in log
    assert "Model 'iris-onnx': predict and predict_proba served by ONNX Runtime" in log
