"""CatBoost on a real server: labels and probabilities equal CatBoost's own."""

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

BOTH = ("predict", "predict_proba")


def test_text_labels_and_probabilities(
    framework_rest: httpx.Client, framework_grpc: Any, framework_models: FrameworkModels
) -> None:
    classifier = framework_models.trained["catboost-iris"]
    rows = IRIS_X[::25]
    labels = classifier.predict(rows).reshape(-1).tolist()
    probabilities = classifier.predict_proba(rows)

    outputs = rest_infer(framework_rest, "catboost-iris", {"input-0": rows}, outputs=BOTH)
    assert outputs["predict"][:, 0].tolist() == labels
    np.testing.assert_allclose(outputs["predict_proba"], probabilities)

    outputs = grpc_infer(framework_grpc, "catboost-iris", {"input-0": rows}, outputs=BOTH)
    assert [label.decode() for label in outputs["predict"][:, 0]] == labels
    np.testing.assert_array_equal(outputs["predict_proba"], probabilities)


def test_predict_is_the_default_output(framework_rest: httpx.Client) -> None:
    assert list(rest_infer(framework_rest, "catboost-iris", {"input-0": IRIS_X[:1]})) == ["predict"]


def test_metadata(framework_rest: httpx.Client) -> None:
    assert metadata_tensors(framework_rest, "catboost-iris") == {
        "inputs": [("input-0", "FP32", [-1, 4])],
        "outputs": [("predict", "BYTES", [-1, 1]), ("predict_proba", "FP64", [-1, 3])],
    }


def test_wrong_feature_count_is_a_400(framework_rest: httpx.Client) -> None:
    body = rest_body({"input-0": IRIS_X[:1, :2]})
    response = framework_rest.post("/v2/models/catboost-iris/infer", json=body)
    assert response.status_code == 400
    assert "expects shape [-1, 4]" in response.text
