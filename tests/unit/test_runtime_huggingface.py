"""HuggingFaceModel: a tiny local pipeline, MLServer-style inputs and outputs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.errors import InvalidRequest
from inferd.runtimes.huggingface import HuggingFaceModel
from inferd.types import Tensor
from tests.frameworks import require_module, save_tiny_text_classifier

from .runtime_helpers import infer, load, model_settings

transformers = require_module("transformers", "huggingface")

IMPLEMENTATION = "inferd.runtimes.huggingface.HuggingFaceModel"
TEXTS = ["the movie was good", "awful plot", "very very not great acting"]
TASK = {"task": "text-classification"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hf")
    save_tiny_text_classifier(folder / "tiny-bert")
    return folder


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    return transformers.pipeline("text-classification", model=str(folder / "tiny-bert"))


def serve(folder: Path, extra: dict[str, Any], **settings: Any) -> HuggingFaceModel:
    parameters = {"uri": "./tiny-bert", "extra": extra}
    return load(HuggingFaceModel, model_settings(folder, IMPLEMENTATION, parameters, **settings))


def texts(*items: str) -> Tensor:
    return Tensor("args", np.array([item.encode() for item in items], dtype=object))


def documents(output: np.ndarray) -> list[Any]:
    assert output.shape[1] == 1
    return [json.loads(item) for item in output[:, 0]]


def assert_same_results(actual: list[Any], expected: list[Any]) -> None:
    assert [row["label"] for row in actual] == [row["label"] for row in expected]
    np.testing.assert_allclose(
        [row["score"] for row in actual], [row["score"] for row in expected], rtol=1e-5
    )


def test_one_json_document_per_text(folder: Path, reference: Any) -> None:
    model = serve(folder, TASK)
    outputs = infer(model, texts(*TEXTS))
    assert list(outputs) == ["output"]
    assert_same_results(documents(outputs["output"]), reference(TEXTS))


def test_batches_give_the_same_results(folder: Path, reference: Any) -> None:
    model = serve(folder, TASK, max_batch_size=2)
    assert model._batch_size == 2
    assert_same_results(documents(infer(model, texts(*TEXTS))["output"]), reference(TEXTS))


def test_other_inputs_are_keyword_arguments(folder: Path, reference: Any) -> None:
    model = serve(folder, TASK)
    top_k = Tensor("top_k", np.array([2]))
    # As MLServer's client codec sends it: content type "hf" for the request.
    parameters = {"content_type": "hf"}
    rows = documents(infer(model, texts(*TEXTS[:2]), top_k, parameters=parameters)["output"])
    assert len(rows) == 2
    expected = reference(TEXTS[:2], top_k=2)
    assert [len(row) for row in rows] == [2, 2]
    for actual_row, expected_row in zip(rows, expected, strict=True):
        assert_same_results(actual_row, expected_row)


def test_pretrained_model_relative_to_the_model_folder(folder: Path, reference: Any) -> None:
    settings = model_settings(
        folder, IMPLEMENTATION, {"extra": {**TASK, "pretrained_model": "tiny-bert"}}
    )
    model = load(HuggingFaceModel, settings)
    assert_same_results(documents(infer(model, texts(TEXTS[0]))["output"]), reference(TEXTS[:1]))


def test_metadata(folder: Path) -> None:
    metadata = serve(folder, TASK).metadata()
    assert [(t.name, t.datatype, t.shape, t.parameters) for t in metadata.inputs] == [
        ("args", "BYTES", [-1], {"content_type": "str"})
    ]
    assert [(t.name, t.datatype, t.shape, t.parameters) for t in metadata.outputs] == [
        ("output", "BYTES", [-1, 1], {"content_type": "hg_jsonlist"})
    ]


def test_request_without_inputs_is_refused(folder: Path) -> None:
    with pytest.raises(InvalidRequest, match=r"input named 'args'"):
        infer(serve(folder, TASK))


def test_arguments_the_pipeline_refuses_are_a_400(folder: Path) -> None:
    with pytest.raises(
        InvalidRequest, match=r"inputs \('args', 'truncation'\): \['sideways'\] is not a valid"
    ):
        infer(
            serve(folder, TASK),
            texts("good"),
            Tensor("truncation", np.array([b"sideways"], dtype=object)),
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, r"set parameters.extra.task"),
        ({**TASK, "optimum_model": True}, r"optimum_model is not supported"),
        ({**TASK, "framework": "tf"}, r"framework 'tf' is not supported"),
    ],
)
def test_bad_settings_fail_the_load(folder: Path, extra: dict[str, Any], message: str) -> None:
    model = HuggingFaceModel(model_settings(folder, IMPLEMENTATION, {"extra": extra}))
    with pytest.raises(ValueError, match=message):
        asyncio.run(model.load())
