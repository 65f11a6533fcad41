"""The framework models the runtime e2e tests serve, trained here on small data
sets that ship with scikit-learn (nothing is downloaded), and client helpers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import joblib
import numpy as np
from sklearn.datasets import load_diabetes, load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from tests.frameworks import require_module, save_mlflow_frame_model, save_mlflow_tensor_model
from tests.support.models import write_model_folder

IRIS_X, IRIS_Y = load_iris(return_X_y=True)
DIABETES_X, DIABETES_Y = load_diabetes(return_X_y=True)
SPECIES = np.array(["setosa", "versicolor", "virginica"])
ONNX_IR_VERSION = 9  # what the installed ONNX Runtime reads; onnx.helper writes newer


@dataclass
class FrameworkModels:
    """The repository and, by model name, the framework objects it was saved from."""

    repository: Path
    trained: dict[str, Any] = field(default_factory=dict)


def write_settings(folder: Path, implementation: str, **settings: Any) -> None:
    """The model-settings.json of a framework model whose files are in ``folder``."""
    write_model_folder(folder.parent, folder.name, implementation, **settings)


def build_framework_repository(repository: Path) -> FrameworkModels:
    models = FrameworkModels(repository)
    for build in (
        _xgboost_models,
        _lightgbm_model,
        _catboost_model,
        _onnx_model,
        _mlflow_models,
        _sklearn_onnx_models,
    ):
        build(models)
    return models


def _folder(models: FrameworkModels, name: str) -> Path:
    folder = models.repository / name
    folder.mkdir(parents=True)
    return folder


def _xgboost_models(models: FrameworkModels) -> None:
    xgb = require_module("xgboost", "xgboost")
    folder = _folder(models, "xgboost-iris")
    classifier = xgb.XGBClassifier(n_estimators=5, max_depth=2).fit(IRIS_X, IRIS_Y)
    classifier.save_model(folder / "model.json")
    # MLServer's name for the runtime; adaptive batching on.
    write_settings(folder, "mlserver_xgboost.XGBoostModel", max_batch_size=16, max_batch_time=0.005)
    models.trained["xgboost-iris"] = classifier

    folder = _folder(models, "xgboost-diabetes")
    data = xgb.DMatrix(DIABETES_X, label=DIABETES_Y)
    booster = xgb.train({"objective": "reg:squarederror"}, data, num_boost_round=5)
    booster.save_model(folder / "diabetes.ubj")
    write_settings(
        folder, "inferd.runtimes.xgboost.XGBoostModel", parameters={"uri": "./diabetes.ubj"}
    )
    models.trained["xgboost-diabetes"] = booster


def _lightgbm_model(models: FrameworkModels) -> None:
    lgb = require_module("lightgbm", "lightgbm")
    folder = _folder(models, "lightgbm-iris")
    params = {"objective": "multiclass", "num_class": 3, "verbose": -1, "num_iterations": 5}
    booster = lgb.train(params, lgb.Dataset(IRIS_X, IRIS_Y))
    booster.save_model(str(folder / "model.txt"))
    write_settings(folder, "mlserver_lightgbm.LightGBMModel")
    models.trained["lightgbm-iris"] = booster


def _catboost_model(models: FrameworkModels) -> None:
    catboost = require_module("catboost", "catboost")
    folder = _folder(models, "catboost-iris")
    classifier = catboost.CatBoostClassifier(iterations=5, verbose=False, allow_writing_files=False)
    classifier.fit(IRIS_X, SPECIES[IRIS_Y])
    classifier.save_model(str(folder / "model.cbm"))
    write_settings(folder, "mlserver_catboost.CatboostModel")
    models.trained["catboost-iris"] = classifier


def add_and_multiply_graph() -> Any:
    """sum = a + b and prod = a * b, for a and b of shape [batch, 3] (FP32)."""
    onnx = require_module("onnx", "onnx")
    helper, tensor = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Mul", ["a", "b"], ["prod"]),
        ],
        "add_and_multiply",
        [
            helper.make_tensor_value_info("a", tensor.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("b", tensor.FLOAT, ["batch", 3]),
        ],
        [
            helper.make_tensor_value_info("sum", tensor.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("prod", tensor.FLOAT, ["batch", 3]),
        ],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ONNX_IR_VERSION
    )


def _onnx_model(models: FrameworkModels) -> None:
    onnx = require_module("onnx", "onnx")
    folder = _folder(models, "onnx-arithmetic")
    onnx.save(add_and_multiply_graph(), str(folder / "model.onnx"))
    extra = {"intra_op_threads": 1, "inter_op_threads": 1}
    write_settings(folder, "inferd.runtimes.onnx.OnnxModel", parameters={"extra": extra})


def _mlflow_models(models: FrameworkModels) -> None:
    folder = _folder(models, "mlflow-iris")
    models.trained["mlflow-iris"] = save_mlflow_frame_model(folder / "model")
    write_settings(folder, "mlserver_mlflow.MLflowRuntime", parameters={"uri": "./model"})

    folder = _folder(models, "mlflow-scale")
    save_mlflow_tensor_model(folder / "model")
    write_settings(folder, "inferd.runtimes.mlflow.MLflowModel", parameters={"uri": "./model"})


def _sklearn_onnx_models(models: FrameworkModels) -> None:
    require_module("skl2onnx", "sklearn-onnx")
    accelerate = {"extra": {"accelerate": "onnx"}}
    for name, estimator in (
        ("iris-onnx", LogisticRegression(max_iter=1000)),
        # skl2onnx cannot convert a FunctionTransformer with a function: the fallback.
        (
            "iris-onnx-fallback",
            make_pipeline(FunctionTransformer(np.abs), LogisticRegression(max_iter=1000)),
        ),
    ):
        folder = _folder(models, name)
        estimator.fit(IRIS_X, IRIS_Y)
        joblib.dump(estimator, folder / "model.joblib")
        write_settings(folder, "inferd.runtimes.sklearn.SKLearnModel", parameters=accelerate)
        models.trained[name] = estimator


# ---- clients ---------------------------------------------------------------------------

DATATYPES = {"f": {4: "FP32", 8: "FP64"}, "i": {4: "INT32", 8: "INT64"}}


def rest_infer(
    client: httpx.Client,
    model: str,
    inputs: dict[str, np.ndarray],
    outputs: tuple[str, ...] = (),
    parameters: dict[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """POST a JSON infer request; the outputs by name, shaped as sent."""
    response = client.post(f"/v2/models/{model}/infer", json=rest_body(inputs, outputs, parameters))
    assert response.status_code == 200, response.text
    return {
        output["name"]: np.array(output["data"]).reshape(output["shape"])
        for output in response.json()["outputs"]
    }


def rest_body(
    inputs: dict[str, np.ndarray],
    outputs: tuple[str, ...] = (),
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"inputs": [_rest_tensor(name, array) for name, array in inputs.items()]}
    if outputs:
        body["outputs"] = [{"name": name} for name in outputs]
    if parameters:
        body["parameters"] = parameters
    return body


def _rest_tensor(name: str, array: np.ndarray) -> dict[str, Any]:
    if array.dtype.kind in "OU":
        data = [item.decode() if isinstance(item, bytes) else item for item in array.reshape(-1)]
        datatype = "BYTES"
    else:
        data, datatype = array.reshape(-1).tolist(), DATATYPES[array.dtype.kind][array.itemsize]
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": data}


def grpc_infer(
    client: Any, model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """Infer with tritonclient.grpc; the outputs by name (all if none asked)."""
    import tritonclient.grpc as triton
    from tritonclient.utils import np_to_triton_dtype

    tensors = []
    for name, array in inputs.items():
        tensor = triton.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    requested = [triton.InferRequestedOutput(name) for name in outputs] or None
    result = client.infer(model, tensors, outputs=requested)
    names = outputs or [output.name for output in result.get_response().outputs]
    return {name: result.as_numpy(name) for name in names}


def metadata_tensors(
    client: httpx.Client, model: str
) -> dict[str, list[tuple[str, str, list[int]]]]:
    response = client.get(f"/v2/models/{model}")
    assert response.status_code == 200, response.text
    body = response.json()
    return {
        side: [(t["name"], t["datatype"], t["shape"]) for t in body[side]]
        for side in ("inputs", "outputs")
    }
