"""inferd/triton/classification.py: Triton's top-k classes of an output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferd.errors import ConfigurationError, InvalidRequest
from inferd.settings import ModelSettings
from inferd.triton.classification import Classifier
from inferd.types import InferenceResponse, Tensor


def classifier(tmp_path: Path, max_batch_size: int = 0, labels: str | None = None) -> Classifier:
    output: dict[str, object] = {"name": "y", "datatype": "FP32", "shape": [-1]}
    if labels is not None:
        (tmp_path / "labels.txt").write_text(labels)
        output["parameters"] = {"label_filename": "labels.txt"}
    settings = ModelSettings.model_validate(
        {"name": "m", "max_batch_size": max_batch_size, "outputs": [output]}
    )
    settings._source = tmp_path / "model-settings.json"
    return Classifier(settings)


def test_largest_first_ties_by_index_with_labels(tmp_path: Path) -> None:
    classes = classifier(tmp_path, labels="a\nb\n")
    top = classes.top(Tensor("y", np.array([0.5, 2.0, 0.5, 3.0], np.float32)), 3)
    assert top.tolist() == [b"3.000000:3", b"2.000000:1:b", b"0.500000:0:a"]


def test_integers_unsigned_and_batches(tmp_path: Path) -> None:
    classes = classifier(tmp_path, max_batch_size=4)
    data = np.array([[1, 255, 7], [9, 0, 9]], np.uint8)
    assert classes.top(Tensor("y", data), 2).tolist() == [[b"255:1", b"7:2"], [b"9:0", b"9:2"]]
    flat = classifier(tmp_path).top(Tensor("y", data), 2)
    assert flat.tolist() == [b"255:1", b"9:3"]


def test_the_response_given_is_left_as_it_was(tmp_path: Path) -> None:
    response = InferenceResponse([Tensor("y", np.array([1.0, 2.0])), Tensor("z", np.ones(1))])
    classified = classifier(tmp_path).classified(response, {"y": 1})
    assert classified.outputs[0].data.tolist() == [b"2.000000:1"]
    assert classified.outputs[1] is response.outputs[1]
    assert response.outputs[0].data.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("dtype", [np.float16, np.bool_, np.object_])
def test_outputs_without_an_order_are_refused(tmp_path: Path, dtype: type) -> None:
    with pytest.raises(InvalidRequest, match="unsupported type"):
        classifier(tmp_path).top(Tensor("y", np.zeros(2, dtype=dtype)), 1)


def test_a_missing_label_file_fails_the_load(tmp_path: Path) -> None:
    settings = ModelSettings.model_validate(
        {
            "name": "m",
            "outputs": [
                {
                    "name": "y",
                    "datatype": "FP32",
                    "shape": [1],
                    "parameters": {"label_filename": "gone.txt"},
                }
            ],
        }
    )
    settings._source = tmp_path / "model-settings.json"
    with pytest.raises(ConfigurationError, match=r"gone\.txt"):
        Classifier(settings)


@pytest.mark.parametrize("max_batch_size", [0, 4])
def test_a_triton_folder_batches_and_labels_as_its_config_pbtxt_says(
    tmp_path: Path, max_batch_size: int
) -> None:
    """As in Triton: rows when max_batch_size > 0 (with or without dynamic_batching),
    labels from the output's label_filename in config.pbtxt (Triton's image_client.py
    reads 'value:index:label' from a batched model's [1, k])."""
    from inferd.triton.model_folder import read_model

    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (folder / "labels.txt").write_text("zero\none\ntwo\n")
    (folder / "config.pbtxt").write_text(
        f'backend: "python" max_batch_size: {max_batch_size}\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]\n'
    )
    (settings,) = read_model(folder)
    data = np.array([[0.1, 0.7, 0.2]], dtype=np.float32)
    top = Classifier(settings).top(Tensor("y", data if max_batch_size else data[0]), 2)
    expected = [b"0.700000:1:one", b"0.200000:2:two"]
    assert top.tolist() == ([expected] if max_batch_size else expected)
