"""Fixtures that build model repositories and start real servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.http
from sklearn.datasets import load_iris

from inferd.protocol import pb_grpc
from tests.support.models import add_custom_model, add_sklearn_model
from tests.support.serverproc import ServerProcess, start_server

# Metadata the `typed` model (an Echo) declares in its model-settings.json.
TYPED_METADATA: dict[str, Any] = {
    "platform": "custom-echo",
    "versions": ["numpy/2"],
    "inputs": [
        {"name": "text", "datatype": "BYTES", "shape": [-1]},
        {"name": "image", "datatype": "UINT8", "shape": [-1, 28, 28]},
    ],
    "outputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
}


@pytest.fixture(scope="session")
def iris_features() -> np.ndarray:
    return load_iris(return_X_y=True)[0]


@pytest.fixture(scope="session")
def main_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository most tests share: sklearn, custom, versioned and failing models."""
    repository = tmp_path_factory.mktemp("repository")
    add_sklearn_model(repository)
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "double/v1", "AsyncDouble", parameters={"version": "1"})
    add_custom_model(repository, "double/v2", "AsyncDouble", parameters={"version": "2"})
    add_custom_model(repository, "fails", "FailsToPredict")
    add_custom_model(repository, "typed", "Echo", **TYPED_METADATA)
    return repository


@pytest.fixture(scope="session")
def server(main_repository: Path) -> Iterator[ServerProcess]:
    """One shared server (parallel_workers 0) on the main repository."""
    with start_server(main_repository) as process:
        yield process


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start extra servers for one test; all are stopped when it ends."""
    started: list[ServerProcess] = []

    def _start(repository: Path | None = None, **kwargs: Any) -> ServerProcess:
        process = start_server(repository or tmp_path, log_dir=tmp_path, **kwargs)
        started.append(process)
        return process

    yield _start
    for process in started:
        process.stop()


@pytest.fixture(scope="session")
def rest(server: ServerProcess) -> Iterator[httpx.Client]:
    """An HTTP client for the shared server's REST API."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def triton_http(server: ServerProcess) -> Iterator[tritonclient.http.InferenceServerClient]:
    """tritonclient's HTTP client on the shared server, with its default settings."""
    client = tritonclient.http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def stub(server: ServerProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    """A plain grpcio stub of the inference service on the shared server."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


# ---- framework runtimes (test_runtimes_*.py): one server for every framework model ----


@pytest.fixture(scope="session")
def framework_models(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A repository of XGBoost, LightGBM, CatBoost, ONNX, MLflow and accelerated
    scikit-learn models (see runtime_models.py); frameworks import only if used."""
    from .runtime_models import build_framework_repository

    return build_framework_repository(tmp_path_factory.mktemp("frameworks"))


@pytest.fixture(scope="session")
def framework_server(framework_models: Any) -> Iterator[ServerProcess]:
    with start_server(framework_models.repository) as process:
        yield process


@pytest.fixture(scope="session")
def framework_rest(framework_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=framework_server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def framework_grpc(framework_server: ServerProcess) -> Iterator[Any]:
    """tritonclient's gRPC client on the framework server."""
    import tritonclient.grpc

    with tritonclient.grpc.InferenceServerClient(framework_server.grpc_address) as client:
        yield client


# A server with the streaming test models, in process and with 2 worker processes.


@pytest.fixture(scope="module", params=[0, 2], ids=["in-process", "2-workers"])
def streaming_workers(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture(scope="module")
def streaming_repository(tmp_path_factory: pytest.TempPathFactory, streaming_workers: int) -> Path:
    """Tokens (async generator), ThreadTokens (plain generator), AsyncDouble (predicts).
    One per server: the files a stopped generator leaves must be that server's."""
    repository = tmp_path_factory.mktemp(f"streaming-{streaming_workers}")
    add_custom_model(repository, "tokens", "Tokens")
    add_custom_model(repository, "thread-tokens", "ThreadTokens", threads_per_worker=2)
    add_custom_model(repository, "double", "AsyncDouble")
    return repository


@pytest.fixture(scope="module")
def streaming_server(streaming_repository: Path, streaming_workers: int) -> Iterator[ServerProcess]:
    with start_server(
        streaming_repository, settings={"parallel_workers": streaming_workers}
    ) as process:
        yield process
