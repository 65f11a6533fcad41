"""LightGBM on a real server: REST and gRPC answers equal Booster.predict."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np

from .runtime_models import (
    IRIS_X,
    FrameworkModels,
    grpc_infer,
    metadata_tensors,
    rest_body,
    rest_infer,
)


def test_predict_over_rest_and_grpc(
    framework_rest: httpx.Client, framework_grpc: Any, framework_models: FrameworkModels
) -> None:
    booster = framework_models.trained["lightgbm-iris"]
    rows = IRIS_X[::20]
    expected = booster.predict(rows)
    np.testing.assert_allclose(
        rest_infer(framework_rest, "lightgbm-iris", {"input-0": rows})["predict"], expected
    )
    np.testing.assert_array_equal(
        grpc_infer(framework_grpc, "lightgbm-iris", {"input-0": rows})["predict"], expected
    )


def test_dataframe_request(framework_rest: httpx.Client, framework_models: FrameworkModels) -> None:
    booster = framework_models.trained["lightgbm-iris"]
    columns = {f"f{i}": IRIS_X[:3, i] for i in range(4)}
    outputs = rest_infer(
        framework_rest, "lightgbm-iris", columns, parameters={"content_type": "pd"}
    )
    np.testing.assert_allclose(outputs["predict"], booster.predict(IRIS_X[:3]))


def test_metadata(framework_rest: httpx.Client) -> None:
    assert metadata_tensors(framework_rest, "lightgbm-iris") == {
        "inputs": [("input-0", "FP64", [-1, 4])],
        "outputs": [("predict", "FP64", [-1, 3])],
    }


def test_wrong_feature_count_is_a_400(framework_rest: httpx.Client) -> None:
    body = rest_body({"input-0": np.zeros((2, 6))})
    response = framework_rest.post("/v2/models/lightgbm-iris/infer", json=body)
    assert response.status_code == 400
    assert "has shape [2, 6], but model 'lightgbm-iris' expects shape [-1, 4]" in response.text
