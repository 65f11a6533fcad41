"""MLServer deployments move over unchanged: its folder layout, settings and env vars."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import joblib
import numpy as np
import pytest
from sklearn import datasets, svm
from sklearn.model_selection import train_test_split

from inferd.protocol import pb, pb_grpc
from inferd.settings.runtime_names import MLSERVER_SKLEARN
from tests.support.models import train_iris, write_model_folder
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, free_ports, start_server

from .test_settings_e2e import launch

# A runtime in a model's folder, importing a module that sits beside it.
CUSTOM_RUNTIME = """
import numpy as np
from inferd import InferenceRequest, InferenceResponse, Model, Tensor
from {helper} import OFFSET

FACTOR = {factor}


class MyModel(Model):
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse([Tensor("y", request.input("x").data * FACTOR + OFFSET)])
"""


def add_custom_runtime(repository: Path, folder: str, factor: int, offset: int = 1) -> None:
    """MLServer's custom-runtime layout: runtime.py beside model-settings.json,
    importing a helper module that every such folder names the same."""
    files = {
        "runtime.py": CUSTOM_RUNTIME.format(helper="helper", factor=factor),
        "helper.py": f"OFFSET = {offset}\n",
    }
    write_model_folder(repository, folder, "runtime.MyModel", name=None, files=files)


@pytest.fixture(scope="module")
def mlserver_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sklearn example of MLServer's docs, plus an unnamed model and custom runtimes."""
    folder = tmp_path_factory.mktemp("mlserver-example")
    # As in MLServer's docs: train an SVM on the digits and save it with joblib.
    digits = datasets.load_digits()
    data = digits.images.reshape((len(digits.images), -1))
    classifier = svm.SVC(gamma=0.001)
    features, _, labels, _ = train_test_split(data, digits.target, test_size=0.5, shuffle=False)
    classifier.fit(features, labels)
    joblib.dump(classifier, folder / "mnist-svm.joblib")
    parameters = {"uri": "./mnist-svm.joblib", "version": "v0.1.0"}
    write_model_folder(folder, ".", MLSERVER_SKLEARN, name="mnist-svm", parameters=parameters)
    # MLServer's multi-model layout: no "name", so the folder's name is the model's.
    iris = write_model_folder(folder, "iris", MLSERVER_SKLEARN, name=None, parameters={"uri": "."})
    train_iris(iris / "model.joblib")
    add_custom_runtime(folder, "my-model", factor=2)
    add_custom_runtime(folder, "other-model", factor=3, offset=5)
    return folder


@pytest.fixture(scope="module")
def mlserver_server(mlserver_repository: Path) -> Iterator[ServerProcess]:
    # settings.json with MLServer's own keys (debug as the string its docs use).
    settings = {
        "debug": "true",
        "metrics_dir": str(mlserver_repository / ".metrics"),
        "environments_dir": str(mlserver_repository / ".envs"),
    }
    with start_server(mlserver_repository, settings=settings) as server:
        yield server


def test_mlservers_sklearn_example_is_served_unchanged(
    mlserver_repository: Path, mlserver_server: ServerProcess
) -> None:
    digits = datasets.load_digits()
    data = digits.images.reshape((len(digits.images), -1))
    _, test_features, _, _ = train_test_split(data, digits.target, test_size=0.5, shuffle=False)
    x_0 = test_features[0:1]
    # The request exactly as MLServer's docs send it.
    request = {
        "inputs": [
            {"name": "predict", "shape": x_0.shape, "datatype": "FP32", "data": x_0.tolist()}
        ]
    }
    endpoint = f"{mlserver_server.url}/v2/models/mnist-svm/versions/v0.1.0/infer"
    response = httpx.post(endpoint, json=request, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["model_name"], body["model_version"]) == ("mnist-svm", "v0.1.0")
    classifier = joblib.load(mlserver_repository / "mnist-svm.joblib")
    (output,) = body["outputs"]
    assert output["name"] == "predict"
    assert output["data"] == classifier.predict(x_0.astype(np.float32)).tolist()


def test_an_unnamed_model_takes_its_folders_name(
    mlserver_server: ServerProcess, iris_features: np.ndarray
) -> None:
    request = {
        "inputs": [
            {
                "name": "input-0",
                "shape": [2, 4],
                "datatype": "FP64",
                "data": iris_features[:2].tolist(),
            }
        ]
    }
    response = httpx.post(f"{mlserver_server.url}/v2/models/iris/infer", json=request, timeout=30)
    assert response.status_code == 200, response.text
    assert len(response.json()["outputs"][0]["data"]) == 2


def test_custom_runtimes_in_model_folders_are_importable(mlserver_server: ServerProcess) -> None:
    def y(model: str) -> list[int]:
        body = {"inputs": [{"name": "x", "shape": [2], "datatype": "INT64", "data": [1, 5]}]}
        response = httpx.post(f"{mlserver_server.url}/v2/models/{model}/infer", json=body)
        assert response.status_code == 200, response.text
        return list(response.json()["outputs"][0]["data"])

    # Both folders ship a runtime.py with a MyModel and a helper.py beside it:
    # each model gets its own of both.
    assert y("my-model") == [3, 11]
    assert y("other-model") == [8, 20]


def test_mlserver_settings_inferd_ignores_are_accepted_with_a_warning(
    mlserver_server: ServerProcess,
) -> None:
    log = mlserver_server.log()
    assert "Setting 'metrics_dir' is accepted for MLServer compatibility but has no effect" in log
    assert "'environments_dir' is accepted" not in log  # it is acted on (environments)
    # debug "true" took effect: debug logging is on.
    assert " DEBUG [" in log


def test_a_kserve_style_start_from_environment_variables_alone(
    tmp_path: Path, iris_features: np.ndarray
) -> None:
    """KServe's MLServer runtime: no settings files, everything in MLSERVER_* variables."""
    models_dir = tmp_path / "mnt-models"  # where KServe's storage initializer puts the model
    models_dir.mkdir()
    classifier = train_iris(models_dir / "model.joblib")
    http_port, grpc_port, metrics_port = free_ports(3)
    env = {
        "MLSERVER_MODEL_NAME": "iris-kserve",
        "MLSERVER_MODEL_IMPLEMENTATION": "mlserver_sklearn.SKLearnModel",
        "MLSERVER_MODEL_URI": "mnt-models",  # relative: to the working directory
        "MLSERVER_HTTP_PORT": str(http_port),
        "MLSERVER_GRPC_PORT": str(grpc_port),
        "MLSERVER_METRICS_PORT": str(metrics_port),
        "MLSERVER_PARALLEL_WORKERS": "0",
    }
    server = launch(
        ["start", str(models_dir)],
        cwd=tmp_path,
        log_dir=tmp_path,
        env=env,
        ports=(http_port, grpc_port, metrics_port),
    )
    try:
        server.wait_until("/v2/health/ready")
        assert not (models_dir / "settings.json").exists()
        request = {
            "inputs": [
                {
                    "name": "input-0",
                    "shape": [3, 4],
                    "datatype": "FP64",
                    "data": iris_features[:3].tolist(),
                }
            ]
        }
        response = httpx.post(f"{server.url}/v2/models/iris-kserve/infer", json=request)
        assert response.status_code == 200, response.text
        expected = classifier.predict(iris_features[:3]).tolist()
        assert [row for row in np.ravel(response.json()["outputs"][0]["data"])] == expected
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            ready = wait_for(
                lambda: stub.ModelReady(pb.ModelReadyRequest(name="iris-kserve"), timeout=5).ready,
                "the model to be ready over gRPC",
            )
            assert ready
    finally:
        server.stop()
