"""Each runtime without its framework: the load fails with an install line that
names an extra pyproject.toml defines (and that `all` includes)."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from inferd.runtimes.catboost import CatBoostModel
from inferd.runtimes.common import MissingExtraError
from inferd.runtimes.huggingface import HuggingFaceModel
from inferd.runtimes.lightgbm import LightGBMModel
from inferd.runtimes.mlflow import MLflowModel
from inferd.runtimes.onnx import OnnxModel
from inferd.runtimes.sklearn import SKLearnModel
from inferd.runtimes.vllm import VLLMModel
from inferd.runtimes.xgboost import XGBoostModel
from tests.support.models import train_iris

from .runtime_helpers import model_settings

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
EXTRAS = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
INSTALL_LINE = re.compile(r"pip install 'inferd\[([\w-]+)\]'")

RUNTIMES: list[tuple[type[Any], str, dict[str, Any]]] = [
    (XGBoostModel, "xgboost", {}),
    (LightGBMModel, "lightgbm", {}),
    (CatBoostModel, "catboost", {}),
    (OnnxModel, "onnxruntime", {}),
    (MLflowModel, "mlflow", {}),
    (HuggingFaceModel, "transformers", {"extra": {"task": "text-classification"}}),
    (VLLMModel, "vllm", {}),
]


def assert_names_a_defined_extra(message: str) -> str:
    match = INSTALL_LINE.search(message)
    assert match, message
    extra = match.group(1)
    assert extra in EXTRAS, f"{extra!r} is not an extra in pyproject.toml"
    if extra == "huggingface":  # `all` has transformers, not torch (its build is the user's)
        assert any(item.startswith("transformers") for item in EXTRAS["all"])
    elif extra == "vllm":  # a CUDA build with pinned torch: never pulled in by `all`
        assert not any("vllm" in item for item in EXTRAS["all"])
    else:
        assert extra in EXTRAS["all"][0], f"inferd[all] does not include {extra!r}"
    return extra


@pytest.mark.parametrize(("runtime", "module", "parameters"), RUNTIMES)
def test_missing_framework_fails_the_load_with_the_install_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runtime: type[Any],
    module: str,
    parameters: dict[str, Any],
) -> None:
    # None in sys.modules makes `import module` fail, also for already imported ones.
    for name in [key for key in sys.modules if key == module or key.startswith(f"{module}.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, module, None)
    model = runtime(model_settings(tmp_path, "x.Y", parameters))
    with pytest.raises(MissingExtraError, match=rf"{runtime.__name__} needs {module}") as info:
        asyncio.run(model.load())
    assert_names_a_defined_extra(str(info.value))


def test_missing_skl2onnx_leaves_sklearn_serving_with_the_install_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    train_iris(tmp_path / "model.joblib")
    monkeypatch.setitem(sys.modules, "skl2onnx", None)
    model = SKLearnModel(model_settings(tmp_path, "x.Y", {"extra": {"accelerate": "onnx"}}))
    with caplog.at_level(logging.WARNING):
        assert asyncio.run(model.load()) is True
    assert model._accelerator is None
    assert assert_names_a_defined_extra(caplog.text) == "sklearn-onnx"
