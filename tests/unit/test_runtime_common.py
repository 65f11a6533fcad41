"""Helpers shared by the framework runtimes: artifacts, imports, tabular inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inferd.errors import InvalidRequest
from inferd.model import Model
from inferd.runtimes.common import (
    MissingExtraError,
    cast_input,
    find_model_file,
    import_framework,
    requested_outputs,
    short_error,
    tabular_features,
)
from inferd.types import Tensor

from .runtime_helpers import model_settings, request

WELL_KNOWN = ("model.bst", "model.json")
SUFFIXES = (".bst", ".json", ".ubj")


def find(uri: Path) -> Path:
    return find_model_file(uri, WELL_KNOWN, SUFFIXES, "XGBoost")


def test_file_uri_is_used_as_is(tmp_path: Path) -> None:
    (tmp_path / "anything.bin").write_bytes(b"")
    assert find(tmp_path / "anything.bin") == tmp_path / "anything.bin"


def test_folder_prefers_well_known_names_in_order(tmp_path: Path) -> None:
    for name in ("model.json", "model.bst", "other.ubj"):
        (tmp_path / name).write_bytes(b"")
    assert find(tmp_path) == tmp_path / "model.bst"


@pytest.mark.parametrize("filename", ["churn-v2.ubj", "churn-v2.json"])
def test_folder_with_one_file_of_a_known_suffix(tmp_path: Path, filename: str) -> None:
    (tmp_path / filename).write_bytes(b"")
    (tmp_path / "notes.txt").write_bytes(b"")
    (tmp_path / "model-settings.json").write_text("{}")  # the model's settings, not a model
    assert find(tmp_path) == tmp_path / filename


def test_folder_with_several_candidates_names_them(tmp_path: Path) -> None:
    (tmp_path / "a.ubj").write_bytes(b"")
    (tmp_path / "b.json").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"model\.bst, model\.json.*found a\.ubj, b\.json"):
        find(tmp_path)


def test_missing_path_says_where_to_point(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"No XGBoost model at .*nowhere.*parameters\.uri"):
        find(tmp_path / "nowhere")


def test_missing_framework_gives_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xgboost", None)  # makes `import xgboost` fail
    with pytest.raises(MissingExtraError, match=r"XGBoostModel needs xgboost.*inferd\[xgboost\]"):
        import_framework("xgboost", "XGBoostModel", "xgboost")


def model(tmp_path: Path, content_type: str | None = None) -> Model:
    parameters = {"content_type": content_type} if content_type else {}
    return Model(model_settings(tmp_path, "x.Y", parameters))


FEATURES = np.arange(12, dtype=np.float32).reshape(3, 4)


def test_tabular_features_pass_a_numeric_matrix(tmp_path: Path) -> None:
    features = tabular_features(model(tmp_path), request(Tensor("x", FEATURES)), 4)
    assert features is FEATURES or np.shares_memory(features, FEATURES)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            np.zeros((3, 3)),
            r"shape \[3, 3\], but model 'model' expects shape \[-1, 4\] \(4 features",
        ),
        (np.zeros(4), r"shape \[4\], but model 'model' expects shape \[-1, 4\]"),
        (np.array([[b"a"] * 4], dtype=object), r"must hold numbers, got BYTES"),
    ],
)
def test_tabular_features_refuse_what_the_model_cannot_take(
    tmp_path: Path, data: np.ndarray, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        tabular_features(model(tmp_path), request(Tensor("x", data)), 4)


def test_tabular_features_want_one_input_unless_pd(tmp_path: Path) -> None:
    inputs = [Tensor(name, FEATURES[:, i]) for i, name in enumerate("abcd")]
    with pytest.raises(InvalidRequest, match=r"takes one input of shape \[-1, 4\], got 4.*'pd'"):
        tabular_features(model(tmp_path), request(*inputs), 4)
    frame = tabular_features(
        model(tmp_path), request(*inputs, parameters={"content_type": "pd"}), 4
    )
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == list("abcd")
    # The model's default content type works the same way.
    assert isinstance(tabular_features(model(tmp_path, "pd"), request(*inputs), 4), pd.DataFrame)
    with pytest.raises(InvalidRequest, match=r"expects 4 columns, got 3: a, b, c"):
        tabular_features(model(tmp_path, "pd"), request(*inputs[:3]), 4)


def test_requested_outputs(tmp_path: Path) -> None:
    offered = ("predict", "predict_proba")
    m = model(tmp_path)
    assert requested_outputs(m, request(), offered, ("predict",)) == ("predict",)
    asked = request(outputs=("predict_proba", "predict", "predict_proba"))
    assert requested_outputs(m, asked, offered, ("predict",)) == ("predict_proba", "predict")
    with pytest.raises(
        InvalidRequest, match=r"no output 'score'; it offers predict, predict_proba"
    ):
        requested_outputs(m, request(outputs=("score",)), offered, ("predict",))


def test_cast_input_keeps_the_kind_of_number() -> None:
    assert cast_input("x", np.ones(2), np.dtype(np.float32)).dtype == np.float32
    assert cast_input("x", np.ones(2, np.int32), np.dtype(np.float32)).dtype == np.float32
    with pytest.raises(InvalidRequest, match=r"'x' holds float64 data.*int64"):
        cast_input("x", np.ones(2), np.dtype(np.int64))


def test_short_error_is_one_line_and_bounded() -> None:
    assert short_error(ValueError("a\n  b")) == "a b"
    assert len(short_error("x" * 1000)) == 400
