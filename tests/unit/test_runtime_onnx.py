"""OnnxModel: graph metadata, inputs by name, outputs, casts, settings, errors."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.datasets import load_iris

from inferd.errors import InvalidRequest
from inferd.runtimes.onnx import OnnxModel
from inferd.types import Tensor
from tests.frameworks import require_module
from tests.support.models import train_iris

from .runtime_helpers import infer, load, model_settings

onnx = require_module("onnx", "onnx")
skl2onnx = require_module("skl2onnx", "onnx")
require_module("onnxruntime", "onnx")

IMPLEMENTATION = "inferd.runtimes.onnx.OnnxModel"
IR_VERSION = 9  # what the installed ONNX Runtime reads; onnx.helper writes newer by default


def add_and_multiply() -> Any:
    """sum = a + b and prod = a * b for a, b of shape [batch, 3]; scale = 2 * c ([2])."""
    helper, tensor = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Mul", ["a", "b"], ["prod"]),
            helper.make_node("Add", ["c", "c"], ["twice"]),
        ],
        "add_and_multiply",
        [
            helper.make_tensor_value_info("a", tensor.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("b", tensor.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("c", tensor.INT64, [2]),
        ],
        [
            helper.make_tensor_value_info("sum", tensor.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("prod", tensor.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("twice", tensor.INT64, [2]),
        ],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION
    )


def text_identity() -> Any:
    helper, tensor = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("Identity", ["text"], ["same"])],
        "text_identity",
        [helper.make_tensor_value_info("text", tensor.STRING, [None])],
        [helper.make_tensor_value_info("same", tensor.STRING, [None])],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION
    )


def serve(folder: Path, graph: Any, filename: str = "model.onnx", **extra: Any) -> OnnxModel:
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(graph, str(folder / filename))
    parameters = {"extra": extra} if extra else {}
    return load(OnnxModel, model_settings(folder, IMPLEMENTATION, parameters))


A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.full((2, 3), 2, dtype=np.float32)
C = np.array([5, 7], dtype=np.int64)


@pytest.fixture
def arithmetic(tmp_path: Path) -> OnnxModel:
    return serve(tmp_path, add_and_multiply())


def test_metadata_comes_from_the_graph(arithmetic: OnnxModel) -> None:
    metadata = arithmetic.metadata()
    assert [(t.name, t.datatype, t.shape) for t in metadata.inputs] == [
        ("a", "FP32", [-1, 3]),
        ("b", "FP32", [-1, 3]),
        ("c", "INT64", [2]),
    ]
    assert [(t.name, t.datatype, t.shape) for t in metadata.outputs] == [
        ("sum", "FP32", [-1, 3]),
        ("prod", "FP32", [-1, 3]),
        ("twice", "INT64", [2]),
    ]


def test_inputs_by_name_and_every_output(arithmetic: OnnxModel) -> None:
    outputs = infer(arithmetic, Tensor("c", C), Tensor("b", B), Tensor("a", A))
    assert list(outputs) == ["sum", "prod", "twice"]
    np.testing.assert_array_equal(outputs["sum"], A + B)
    np.testing.assert_array_equal(outputs["prod"], A * B)
    np.testing.assert_array_equal(outputs["twice"], [10, 14])


def test_requested_outputs_only(arithmetic: OnnxModel) -> None:
    outputs = infer(arithmetic, Tensor("a", A), Tensor("b", B), Tensor("c", C), outputs=("prod",))
    assert list(outputs) == ["prod"]


def test_numbers_are_cast_to_the_graph_type(arithmetic: OnnxModel) -> None:
    outputs = infer(arithmetic, Tensor("a", A.astype(np.float64)), Tensor("b", B), Tensor("c", C))
    assert outputs["sum"].dtype == np.float32
    with pytest.raises(InvalidRequest, match=r"'c' holds float64 data.*int64"):
        infer(arithmetic, Tensor("a", A), Tensor("b", B), Tensor("c", C.astype(np.float64)))


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"a": A, "b": B}, r"takes the inputs 'a' FP32 \[-1, 3\], 'b' .*; missing 'c'"),
        ({"a": A, "b": B, "c": C, "d": C}, r"; unknown 'd'"),
        (
            {"a": A[:, :2], "b": B, "c": C},
            r"'a' has shape \[2, 2\], but model 'model' expects shape \[-1, 3\]",
        ),
        ({"a": A, "b": B, "c": C[:1]}, r"'c' has shape \[1\], but .* expects shape \[2\]"),
        ({"a": np.array([[b"x"] * 3], dtype=object), "b": B, "c": C}, r"must be FP32, got BYTES"),
    ],
)
def test_bad_inputs_are_refused(
    arithmetic: OnnxModel, inputs: dict[str, np.ndarray], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        infer(arithmetic, *(Tensor(name, data) for name, data in inputs.items()))


def test_inputs_agree_on_named_dimensions(arithmetic: OnnxModel) -> None:
    # -1 in the metadata for both, but the graph calls both dimensions "batch".
    with pytest.raises(
        InvalidRequest, match=r"'a' and 'b' .* share the dimension 'batch'.* 2 and 3"
    ):
        infer(arithmetic, Tensor("a", A), Tensor("b", np.ones((3, 3), np.float32)), Tensor("c", C))


def test_unknown_output_is_refused(arithmetic: OnnxModel) -> None:
    with pytest.raises(InvalidRequest, match=r"no output 'total'; it offers sum, prod, twice"):
        infer(arithmetic, Tensor("a", A), Tensor("b", B), Tensor("c", C), outputs=("total",))


def test_string_tensors(tmp_path: Path) -> None:
    model = serve(tmp_path, text_identity())
    outputs = infer(model, Tensor("text", np.array([b"caf\xc3\xa9", b"x"], dtype=object)))
    assert outputs["same"].tolist() == [b"caf\xc3\xa9", b"x"]
    assert model.metadata().outputs[0].parameters == {"content_type": "str"}


def test_sequence_outputs_are_json_per_row(tmp_path: Path) -> None:
    features = load_iris(return_X_y=True)[0]
    classifier = train_iris()
    graph = skl2onnx.to_onnx(classifier, features[:1].astype(np.float32))  # with ZipMap
    model = serve(tmp_path, graph)
    outputs = infer(model, Tensor("X", features[:2].astype(np.float32)))
    assert outputs["output_label"].tolist() == classifier.predict(features[:2]).tolist()
    rows = [json.loads(item) for item in outputs["output_probability"][:, 0]]
    expected = classifier.predict_proba(features[:2])
    assert [sorted(row) for row in rows] == [["0", "1", "2"]] * 2
    np.testing.assert_allclose([[row[k] for k in "012"] for row in rows], expected, rtol=1e-4)
    probability = next(t for t in model.metadata().outputs if t.name == "output_probability")
    assert (probability.datatype, probability.parameters) == ("BYTES", {"content_type": "pd_json"})


def test_thread_settings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        model = serve(
            tmp_path, add_and_multiply(), intra_op_threads=1, inter_op_threads=1, treads=2
        )
    assert "parameters.extra treads not used by OnnxModel" in caplog.text
    options = model._session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"intra_op_threads": "four"}, r"intra_op_threads is 'four'; use a whole number"),
        ({"providers": "CPUExecutionProvider"}, r"providers must be a list"),
    ],
)
def test_bad_settings_fail_the_load(tmp_path: Path, extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        serve(tmp_path, add_and_multiply(), **extra)


def test_folder_with_one_onnx_file(tmp_path: Path) -> None:
    model = serve(tmp_path, text_identity(), filename="identity-v2.onnx")
    assert model.metadata().inputs[0].name == "text"
    (tmp_path / "other.onnx").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"found identity-v2\.onnx, other\.onnx"):
        asyncio.run(OnnxModel(model_settings(tmp_path, IMPLEMENTATION)).load())
