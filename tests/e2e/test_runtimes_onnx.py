"""ONNX Runtime on a real server: several named inputs and outputs, graph metadata."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from .runtime_models import grpc_infer, metadata_tensors, rest_body, rest_infer

A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.full((2, 3), 0.5, dtype=np.float32)


def test_every_output_over_rest(framework_rest: httpx.Client) -> None:
    outputs = rest_infer(framework_rest, "onnx-arithmetic", {"b": B, "a": A})
    assert list(outputs) == ["sum", "prod"]
    np.testing.assert_allclose(outputs["sum"], A + B)
    np.testing.assert_allclose(outputs["prod"], A * B)


def test_requested_output_over_grpc(framework_grpc: Any) -> None:
    outputs = grpc_infer(framework_grpc, "onnx-arithmetic", {"a": A, "b": B}, outputs=("prod",))
    assert list(outputs) == ["prod"]
    np.testing.assert_array_equal(outputs["prod"], A * B)


def test_metadata_is_read_from_the_graph(framework_rest: httpx.Client, framework_grpc: Any) -> None:
    expected = {
        "inputs": [("a", "FP32", [-1, 3]), ("b", "FP32", [-1, 3])],
        "outputs": [("sum", "FP32", [-1, 3]), ("prod", "FP32", [-1, 3])],
    }
    assert metadata_tensors(framework_rest, "onnx-arithmetic") == expected
    grpc = framework_grpc.get_model_metadata("onnx-arithmetic")
    assert [(t.name, t.datatype, list(t.shape)) for t in grpc.inputs] == expected["inputs"]


def test_fp64_is_cast_to_the_graph_type(framework_rest: httpx.Client) -> None:
    outputs = rest_infer(framework_rest, "onnx-arithmetic", {"a": A.astype(np.float64), "b": B})
    np.testing.assert_allclose(outputs["sum"], A + B)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"a": A}, "takes the inputs 'a' FP32 [-1, 3], 'b' FP32 [-1, 3]; missing 'b'"),
        (
            {"a": A[:, :2], "b": B[:, :2]},
            "'a' has shape [2, 2], but model 'onnx-arithmetic' expects",
        ),
    ],
)
def test_bad_inputs_are_a_400(
    framework_rest: httpx.Client, inputs: dict[str, np.ndarray], message: str
) -> None:
    response = framework_rest.post("/v2/models/onnx-arithmetic/infer", json=rest_body(inputs))
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_bad_inputs_over_grpc(framework_grpc: Any) -> None:
    with pytest.raises(InferenceServerException, match="share the dimension 'batch'") as info:
        grpc_infer(framework_grpc, "onnx-arithmetic", {"a": A, "b": B[:1]})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
