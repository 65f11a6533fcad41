"""In-process servers: the REST app over httpx's ASGI transport, gRPC on a free port.

The app and the gRPC server are built by :class:`~inferd.server.app.InferenceServer`
exactly as ``inferd start`` builds them, with the in-process pool; only the sockets
of uvicorn are left out.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

from inferd.protocol import pb_grpc
from inferd.server.app import InferenceServer
from inferd.settings import ServerSettings
from tests.support.serverproc import free_port

from .runtimes import Gated

RUNTIMES = "tests.integration.runtimes"
# Small enough for the size-limit tests to build bodies past it cheaply.
REQUEST_LIMIT = 100_000
StartServer = Callable[..., Awaitable[InferenceServer]]


async def until(condition: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    """Poll ``condition`` on the event loop until it is true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"Timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


def add_model(repository: Path, folder: str, implementation: str, **settings: Any) -> Path:
    path = repository / folder
    path.mkdir(parents=True)
    body = {"name": folder.split("/")[0], "implementation": implementation, **settings}
    (path / "model-settings.json").write_text(json.dumps(body))
    return path


@pytest.fixture(scope="session")
def iris(tmp_path_factory: pytest.TempPathFactory) -> LogisticRegression:
    features, labels = load_iris(return_X_y=True)
    return LogisticRegression(max_iter=500).fit(features, labels)


@pytest.fixture(scope="session")
def iris_file(tmp_path_factory: pytest.TempPathFactory, iris: LogisticRegression) -> Path:
    path = tmp_path_factory.mktemp("iris") / "model.joblib"
    joblib.dump(iris, path)
    return path


@pytest.fixture
def repository(tmp_path: Path, iris_file: Path) -> Path:
    """iris (scikit-learn), echo, fails, two versions of `versioned`, and `gated`
    (one request at a time, one more may wait)."""
    repository = tmp_path / "models"
    iris_folder = add_model(
        repository,
        "iris",
        "inferd.runtimes.sklearn.SKLearnModel",
        parameters={"uri": "./model.joblib"},
    )
    # The model is trained once per session and linked from inside the repository
    # (models are read only from under its root).
    (iris_folder / "model.joblib").symlink_to(iris_file)
    add_model(repository, "echo", f"{RUNTIMES}.Echo")
    add_model(repository, "fails", f"{RUNTIMES}.Fails")
    for version in ("1", "2"):
        add_model(
            repository, f"versioned/v{version}", f"{RUNTIMES}.Echo", parameters={"version": version}
        )
    add_model(repository, "gated", f"{RUNTIMES}.Gated", max_queue_size=1)
    return repository


@pytest.fixture
async def start_inferd(repository: Path) -> AsyncIterator[StartServer]:
    """Build servers as ``inferd start`` does (models loaded, ready), in this event
    loop; every one is closed when the test ends."""
    Gated.reset()
    started: list[InferenceServer] = []

    async def start(**settings: Any) -> InferenceServer:
        defaults: dict[str, Any] = {
            "model_repository_root": str(repository),
            "parallel_workers": 0,
            "host": "127.0.0.1",
            "grpc_port": free_port(),
            "max_request_size": REQUEST_LIMIT,
        }
        server = InferenceServer(ServerSettings(**(defaults | settings)))
        started.append(server)
        await server.pool.start()
        await server.load_startup_models()
        return server

    yield start
    Gated.gate.set()  # let held requests end before their models unload
    for server in started:
        await server.close()


@pytest.fixture
async def inferd(start_inferd: StartServer) -> InferenceServer:
    """A server with the default settings (metrics and gzip on, no CORS)."""
    return await start_inferd()


def rest_client(server: InferenceServer) -> httpx.AsyncClient:
    """An httpx client of ``server``'s REST app, called in process."""
    transport = httpx.ASGITransport(app=server.rest_app())
    return httpx.AsyncClient(transport=transport, base_url="http://inferd", timeout=30)


@pytest.fixture
async def rest(inferd: InferenceServer) -> AsyncIterator[httpx.AsyncClient]:
    async with rest_client(inferd) as client:
        yield client


@pytest.fixture
async def stub(inferd: InferenceServer) -> AsyncIterator[pb_grpc.GRPCInferenceServiceStub]:
    """A grpc.aio stub of ``inferd``'s gRPC server, running in this event loop."""
    server = inferd.grpc_server()
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield pb_grpc.GRPCInferenceServiceStub(channel)
    finally:
        await server.stop(0)


def tensor(name: str, datatype: str, data: Any, shape: list[int] | None = None) -> dict[str, Any]:
    """A JSON input tensor; its shape is the data's unless given."""
    return {
        "name": name,
        "datatype": datatype,
        "shape": shape if shape is not None else list(np.shape(data)),
        "data": data,
    }
