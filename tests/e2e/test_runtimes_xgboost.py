"""XGBoost models on a real server: REST and gRPC answers equal XGBoost's own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tests.frameworks import require_module

from .runtime_models import (
    DIABETES_X,
    IRIS_X,
    FrameworkModels,
    grpc_infer,
    metadata_tensors,
    rest_body,
    rest_infer,
)

BOTH = ("predict", "predict_proba")


def test_classifier_over_rest(
    framework_rest: httpx.Client, framework_models: FrameworkModels
) -> None:
    classifier = framework_models.trained["xgboost-iris"]
    rows = IRIS_X[::15]
    outputs = rest_infer(framework_rest, "xgboost-iris", {"input-0": rows}, outputs=BOTH)
    np.testing.assert_array_equal(outputs["predict"][:, 0], classifier.predict(rows))
    np.testing.assert_allclose(outputs["predict_proba"], classifier.predict_proba(rows), rtol=1e-6)


def test_classifier_over_grpc(framework_grpc: Any, framework_models: FrameworkModels) -> None:
    classifier = framework_models.trained["xgboost-iris"]
    rows = IRIS_X[::15].astype(np.float32)
    outputs = grpc_infer(framework_grpc, "xgboost-iris", {"input-0": rows}, outputs=BOTH)
    np.testing.assert_array_equal(outputs["predict"][:, 0], classifier.predict(rows))
    np.testing.assert_array_equal(outputs["predict_proba"], classifier.predict_proba(rows))


def test_booster_regressor(framework_rest: httpx.Client, framework_models: FrameworkModels) -> None:
    xgb = require_module("xgboost", "xgboost")
    booster = framework_models.trained["xgboost-diabetes"]
    outputs = rest_infer(framework_rest, "xgboost-diabetes", {"x": DIABETES_X[:5]})
    expected = booster.predict(xgb.DMatrix(DIABETES_X[:5]))
    np.testing.assert_allclose(outputs["predict"][:, 0], expected, rtol=1e-6)


def test_metadata_shows_real_shapes(framework_rest: httpx.Client) -> None:
    assert metadata_tensors(framework_rest, "xgboost-iris") == {
        "inputs": [("input-0", "FP32", [-1, 4])],
        "outputs": [("predict", "INT64", [-1, 1]), ("predict_proba", "FP32", [-1, 3])],
    }
    assert metadata_tensors(framework_rest, "xgboost-diabetes")["inputs"] == [
        ("input-0", "FP32", [-1, 10])
    ]


def test_wrong_feature_count_is_a_400_naming_the_shape(framework_rest: httpx.Client) -> None:
    response = framework_rest.post(
        "/v2/models/xgboost-iris/infer", json=rest_body({"input-0": IRIS_X[:2, :3]})
    )
    assert response.status_code == 400
    assert "expects shape [-1, 4] (4 features per row)" in response.json()["error"]


def test_wrong_feature_count_over_grpc(framework_grpc: Any) -> None:
    with pytest.raises(InferenceServerException, match=r"expects shape \[-1, 4\]") as info:
        grpc_infer(framework_grpc, "xgboost-iris", {"input-0": np.zeros((1, 5), np.float32)})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_concurrent_requests_each_get_their_rows(
    framework_rest: httpx.Client, framework_models: FrameworkModels
) -> None:
    """The model batches (max_batch_size 16): every client still gets its own rows."""
    classifier = framework_models.trained["xgboost-iris"]
    batches = [IRIS_X[start : start + 1 + start % 3] for start in range(0, 150, 10)]

    def call(rows: np.ndarray) -> np.ndarray:
        return rest_infer(framework_rest, "xgboost-iris", {"input-0": rows}, ("predict_proba",))[
            "predict_proba"
        ]

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(call, batches))
    for rows, answer in zip(batches, answers, strict=True):
        np.testing.assert_allclose(answer, classifier.predict_proba(rows), rtol=1e-6)
