"""SKLearnModel: loading artifacts, choosing methods, inputs, errors, metadata."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_iris
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from inferd.errors import InvalidRequest
from inferd.runtimes.sklearn import SKLearnModel
from inferd.settings import ModelSettings
from inferd.settings.loader import model_settings_from_dict
from inferd.types import InferenceRequest, RequestedOutput, Tensor
from tests.support.models import train_iris

ROOT = Path(__file__).resolve().parents[2]
IRIS_X, IRIS_Y = load_iris(return_X_y=True)


class Broken:
    """An estimator whose own code fails (picklable: defined at module level)."""

    n_features_in_ = 4

    def predict(self, features: Any) -> Any:
        raise ValueError("internal failure")


def load(
    folder: Path,
    estimator: Any,
    filename: str = "model.joblib",
    parameters: dict[str, Any] | None = None,
    **settings: Any,
) -> SKLearnModel:
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump(estimator, folder / filename)
    model = SKLearnModel(model_settings_for(folder, parameters, **settings))
    assert asyncio.run(model.load()) is True
    return model


def model_settings_for(
    folder: Path, parameters: dict[str, Any] | None = None, **settings: Any
) -> ModelSettings:
    data = {"name": "iris", "implementation": "inferd.runtimes.sklearn.SKLearnModel", **settings}
    data["parameters"] = parameters or {}
    return model_settings_from_dict(data, source=folder / "model-settings.json")


def infer(
    model: SKLearnModel,
    *inputs: Tensor,
    outputs: tuple[str, ...] = (),
    content_type: str | None = None,
) -> dict[str, np.ndarray]:
    request = InferenceRequest(
        inputs=list(inputs),
        id="req-1",
        outputs=[RequestedOutput(name) for name in outputs],
        parameters={"content_type": content_type} if content_type else {},
    )
    response = model.predict(request)
    assert response.id == "req-1"
    assert response.model_name == "iris"
    return {tensor.name: tensor.data for tensor in response.outputs}


@pytest.fixture(scope="module")
def classifier() -> LogisticRegression:
    return train_iris()


@pytest.fixture
def iris(tmp_path: Path, classifier: LogisticRegression) -> SKLearnModel:
    return load(tmp_path, classifier)


ROWS = Tensor("input-0", IRIS_X[:5])


# --- loading ------------------------------------------------------------------------


@pytest.mark.parametrize("filename", ["model.joblib", "model.pkl", "model.pickle"])
def test_folder_uri_finds_well_known_file(
    tmp_path: Path, classifier: LogisticRegression, filename: str
) -> None:
    model = load(tmp_path, classifier, filename=filename)
    assert infer(model, ROWS)["predict"].shape == (5, 1)


def test_file_uri_is_used_as_is(tmp_path: Path, classifier: LogisticRegression) -> None:
    model = load(tmp_path, classifier, filename="iris-v3.bin", parameters={"uri": "./iris-v3.bin"})
    assert infer(model, ROWS)["predict"].shape == (5, 1)


def test_folder_without_model_names_the_files_looked_for(tmp_path: Path) -> None:
    model = SKLearnModel(model_settings_for(tmp_path))
    with pytest.raises(
        FileNotFoundError, match=r"model\.joblib, model\.pickle, model\.pkl"
    ) as info:
        asyncio.run(model.load())
    assert str(tmp_path) in str(info.value)


def test_missing_uri_path_is_named(tmp_path: Path) -> None:
    model = SKLearnModel(model_settings_for(tmp_path, {"uri": "./nowhere.joblib"}))
    with pytest.raises(FileNotFoundError, match=r"nowhere\.joblib: the path does not exist"):
        asyncio.run(model.load())


def test_missing_sklearn_gives_an_install_hint(
    tmp_path: Path, classifier: LogisticRegression, monkeypatch: pytest.MonkeyPatch
) -> None:
    joblib.dump(classifier, tmp_path / "model.joblib")
    monkeypatch.setitem(sys.modules, "joblib", None)  # makes `import joblib` fail
    with pytest.raises(ImportError, match=r"pip install inferd\[sklearn\]"):
        asyncio.run(SKLearnModel(model_settings_for(tmp_path)).load())


def test_unknown_predict_fn_fails_the_load(tmp_path: Path, classifier: LogisticRegression) -> None:
    with pytest.raises(ValueError, match=r"predict_fn is 'predict_log'.*predict, predict_proba"):
        load(tmp_path, classifier, parameters={"extra": {"predict_fn": "predict_log"}})


# --- choosing methods ---------------------------------------------------------------


def test_predict_by_default(iris: SKLearnModel, classifier: LogisticRegression) -> None:
    outputs = infer(iris, ROWS)
    assert list(outputs) == ["predict"]
    assert outputs["predict"].dtype == np.int64
    np.testing.assert_array_equal(outputs["predict"][:, 0], classifier.predict(IRIS_X[:5]))


def test_outputs_choose_methods(iris: SKLearnModel, classifier: LogisticRegression) -> None:
    outputs = infer(iris, ROWS, outputs=("predict_proba", "predict"))
    assert list(outputs) == ["predict_proba", "predict"]
    np.testing.assert_allclose(outputs["predict_proba"], classifier.predict_proba(IRIS_X[:5]))


def test_predict_fn_sets_the_default_method(tmp_path: Path, classifier: LogisticRegression) -> None:
    model = load(tmp_path, classifier, parameters={"extra": {"predict_fn": "predict_proba"}})
    assert infer(model, ROWS)["predict_proba"].shape == (5, 3)
    # Outputs named in the request still win.
    assert list(infer(model, ROWS, outputs=("predict",))) == ["predict"]


def test_predict_fn_may_name_any_public_method(
    tmp_path: Path, classifier: LogisticRegression
) -> None:
    model = load(tmp_path, classifier, parameters={"extra": {"predict_fn": "decision_function"}})
    assert infer(model, ROWS)["decision_function"].shape == (5, 3)


def test_transform(tmp_path: Path) -> None:
    scaler = StandardScaler().fit(IRIS_X)
    model = load(tmp_path, scaler)
    expected = scaler.transform(IRIS_X[:5])
    np.testing.assert_allclose(infer(model, ROWS, outputs=("transform",))["transform"], expected)
    # A pure transformer answers with transform when the request names no outputs.
    np.testing.assert_allclose(infer(model, ROWS)["transform"], expected)


def test_sparse_transform_is_sent_dense(tmp_path: Path) -> None:
    encoder = OneHotEncoder().fit(np.array([[0], [1], [2]]))
    model = load(tmp_path, encoder)
    result = infer(model, Tensor("x", np.array([[2], [0]])), outputs=("transform",))["transform"]
    np.testing.assert_array_equal(result, [[0, 0, 1], [1, 0, 0]])


def test_dataframe_result_becomes_one_output_per_column(tmp_path: Path) -> None:
    frame = pd.DataFrame(IRIS_X, columns=["sl", "sw", "pl", "pw"])
    scaler = StandardScaler().set_output(transform="pandas").fit(frame)
    model = load(tmp_path, scaler)
    columns = [Tensor(name, frame[name].to_numpy()[:3]) for name in frame.columns]
    outputs = infer(model, *columns, content_type="pd")
    assert list(outputs) == ["sl", "sw", "pl", "pw"]
    assert outputs["sl"].shape == (3, 1)


def test_unknown_output_lists_the_valid_ones(iris: SKLearnModel) -> None:
    with pytest.raises(InvalidRequest, match=r"no output 'score'.*offers predict, predict_proba"):
        infer(iris, ROWS, outputs=("score",))


def test_predict_proba_of_a_regressor_is_refused(tmp_path: Path) -> None:
    model = load(tmp_path, LinearRegression().fit(IRIS_X, IRIS_Y))
    with pytest.raises(InvalidRequest, match=r"no output 'predict_proba'.*offers predict$"):
        infer(model, ROWS, outputs=("predict_proba",))


# --- inputs -------------------------------------------------------------------------


def test_wrong_feature_count_names_the_expected_shape(iris: SKLearnModel) -> None:
    with pytest.raises(InvalidRequest, match=r"shape \[5, 3\].*expects shape \[-1, 4\]"):
        infer(iris, Tensor("input-0", IRIS_X[:5, :3]))


def test_1d_input_names_the_expected_shape(iris: SKLearnModel) -> None:
    with pytest.raises(InvalidRequest, match=r"shape \[4\].*expects shape \[-1, 4\]"):
        infer(iris, Tensor("input-0", IRIS_X[0]))


def test_input_sklearn_refuses_is_an_invalid_request(iris: SKLearnModel) -> None:
    with pytest.raises(InvalidRequest, match=r"\[-1, 4\]: Input X contains NaN"):
        infer(iris, Tensor("input-0", np.full((1, 4), np.nan)))


def test_failure_inside_the_model_propagates(tmp_path: Path) -> None:
    model = load(tmp_path, Broken())
    with pytest.raises(ValueError, match="internal failure"):
        infer(model, ROWS)


def test_several_inputs_without_pd_are_refused(iris: SKLearnModel) -> None:
    with pytest.raises(InvalidRequest, match=r"takes one input of shape \[-1, 4\], got 2.*'pd'"):
        infer(iris, Tensor("a", IRIS_X[:2]), Tensor("b", IRIS_X[:2]))


def test_dataframe_input_via_pd(tmp_path: Path) -> None:
    frame = pd.DataFrame(IRIS_X, columns=["sl", "sw", "pl", "pw"])
    estimator = LogisticRegression(max_iter=1000).fit(frame, IRIS_Y)
    model = load(tmp_path, estimator)
    columns = [Tensor(name, frame[name].to_numpy()[:5]) for name in frame.columns]
    predicted = infer(model, *columns, content_type="pd")["predict"]
    np.testing.assert_array_equal(predicted[:, 0], estimator.predict(frame[:5]))


def test_pd_as_the_models_default_content_type(tmp_path: Path) -> None:
    frame = pd.DataFrame(IRIS_X, columns=["sl", "sw", "pl", "pw"])
    estimator = LogisticRegression(max_iter=1000).fit(frame, IRIS_Y)
    model = load(tmp_path, estimator, parameters={"content_type": "pd"})
    columns = [Tensor(name, frame[name].to_numpy()[:2]) for name in frame.columns]
    assert infer(model, *columns)["predict"].shape == (2, 1)


def test_pd_with_a_string_column(tmp_path: Path) -> None:
    frame = pd.DataFrame({"color": ["red", "blue", "red", "blue"], "size": [1.0, 2.0, 1.5, 2.5]})
    pipeline = make_pipeline(
        ColumnTransformer([("color", OneHotEncoder(), ["color"])], remainder="passthrough"),
        LogisticRegression(),
    ).fit(frame, [0, 1, 0, 1])
    model = load(tmp_path, pipeline)
    color = np.array([b"blue", b"red"], dtype=object)
    outputs = infer(
        model,
        Tensor("color", color, {"content_type": "str"}),
        Tensor("size", np.array([2.0, 1.0])),
        content_type="pd",
    )
    np.testing.assert_array_equal(outputs["predict"][:, 0], [1, 0])


def test_pd_with_wrong_columns(tmp_path: Path) -> None:
    frame = pd.DataFrame(IRIS_X, columns=["sl", "sw", "pl", "pw"])
    model = load(tmp_path, LogisticRegression(max_iter=1000).fit(frame, IRIS_Y))
    three = [Tensor(name, np.zeros(2)) for name in ("sl", "sw", "pl")]
    with pytest.raises(InvalidRequest, match=r"expects 4 columns \(sl, sw, pl, pw\), got 3"):
        infer(model, *three, content_type="pd")
    renamed = [*three, Tensor("petal", np.zeros(2))]
    with pytest.raises(InvalidRequest, match="feature names should match"):
        infer(model, *renamed, content_type="pd")


# --- metadata -----------------------------------------------------------------------


def test_metadata_is_derived_from_a_classifier(iris: SKLearnModel) -> None:
    metadata = iris.metadata().to_dict()
    assert metadata["inputs"] == [{"name": "input-0", "datatype": "FP64", "shape": [-1, 4]}]
    assert metadata["outputs"] == [
        {"name": "predict", "datatype": "INT64", "shape": [-1, 1]},
        {"name": "predict_proba", "datatype": "FP64", "shape": [-1, 3]},
    ]


def test_metadata_of_text_labels_and_of_a_regressor(tmp_path: Path) -> None:
    names = np.array(["setosa", "versicolor", "virginica"])[IRIS_Y]
    labels = load(tmp_path / "labels", LogisticRegression(max_iter=1000).fit(IRIS_X, names))
    assert labels.metadata().outputs[0].to_dict() == {
        "name": "predict",
        "datatype": "BYTES",
        "shape": [-1, 1],
        "parameters": {"content_type": "str"},
    }
    assert infer(labels, ROWS)["predict"][0, 0] == b"setosa"
    regressor = load(tmp_path / "regressor", LinearRegression().fit(IRIS_X, IRIS_Y))
    assert [o.to_dict() for o in regressor.metadata().outputs] == [
        {"name": "predict", "datatype": "FP64", "shape": [-1, -1]}
    ]


def test_metadata_of_a_dataframe_model_claims_no_inputs(tmp_path: Path) -> None:
    frame = pd.DataFrame(IRIS_X, columns=["sl", "sw", "pl", "pw"])
    model = load(tmp_path, LogisticRegression(max_iter=1000).fit(frame, IRIS_Y))
    assert model.metadata().inputs == []


def test_declared_metadata_wins(tmp_path: Path, classifier: LogisticRegression) -> None:
    declared = [{"name": "features", "datatype": "FP32", "shape": [-1, 4]}]
    model = load(tmp_path, classifier, inputs=declared)
    metadata = model.metadata()
    assert [tensor.to_dict() for tensor in metadata.inputs] == declared
    assert [tensor.name for tensor in metadata.outputs] == ["predict", "predict_proba"]


def test_metadata_before_load_is_the_declared_settings(tmp_path: Path) -> None:
    metadata = SKLearnModel(model_settings_for(tmp_path)).metadata()
    assert (metadata.name, metadata.inputs, metadata.outputs) == ("iris", [], [])


# --- the bundled example --------------------------------------------------------------


def test_bundled_iris_example(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "train_sklearn", ROOT / "examples/train_sklearn.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.save(script.train(), tmp_path / "model.joblib")
    data = json.loads((ROOT / "examples/models/sklearn-iris/model-settings.json").read_text())
    model = SKLearnModel(model_settings_from_dict(data, source=tmp_path / "model-settings.json"))
    asyncio.run(model.load())
    request = InferenceRequest(inputs=[Tensor("input-0", np.array([[5.1, 3.5, 1.4, 0.2]]))])
    assert model.predict(request).outputs[0].data.tolist() == [[0]]
