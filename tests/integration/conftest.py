"""In-process servers: the REST app over httpx's ASGI transport, gRPC on a free port.

The app and the gRPC server are built by :class:`~inferd.server.app.InferenceServer`
exactly as ``inferd start`` builds them, with the in-process pool; only the sockets
of uvicorn are left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from inferd.protocol import pb_grpc
from inferd.server.app import InferenceServer
from inferd.settings import ServerSettings
from tests.support.models import add_sklearn_model, write_model_folder
from tests.support.serverproc import free_port

from .runtimes import Gated, Tokens

RUNTIMES = "tests.integration.runtimes"
# Small enough for the size-limit tests to build bodies past it cheaply.
REQUEST_LIMIT = 100_000
StartServer = Callable[..., Awaitable[InferenceServer]]


def write_models(repository: Path) -> Path:
    """What the integration tests serve (the ``repository`` fixture, tests/conftest.py):
    iris (scikit-learn), echo, fails, two versions of `versioned`, and `gated` (one
    request at a time, one more may wait). A module serving more extends it."""
    add_sklearn_model(repository, "iris")
    write_model_folder(repository, "echo", f"{RUNTIMES}.Echo")
    write_model_folder(repository, "fails", f"{RUNTIMES}.Fails")
    for version in ("1", "2"):
        parameters = {"version": version}
        write_model_folder(
            repository, f"versioned/v{version}", f"{RUNTIMES}.Echo", parameters=parameters
        )
    write_model_folder(repository, "gated", f"{RUNTIMES}.Gated", max_queue_size=1)
    return repository


def settings_for(repository: Path, **settings: Any) -> ServerSettings:
    """The settings of a test's server: ``settings`` over the tests' defaults."""
    defaults: dict[str, Any] = {
        "model_repository_root": str(repository),
        "parallel_workers": 0,
        "host": "127.0.0.1",
        "grpc_port": free_port(),
        "max_request_size": REQUEST_LIMIT,
    }
    return ServerSettings(**(defaults | settings))


@pytest.fixture
async def start_inferd(repository: Path) -> AsyncIterator[StartServer]:
    """Build servers as ``inferd start`` does (models loaded, ready), in this event
    loop; every one is closed when the test ends."""
    Gated.reset()
    Tokens.reset()
    started: list[InferenceServer] = []

    async def start(**settings: Any) -> InferenceServer:
        server = InferenceServer(settings_for(repository, **settings))
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


@contextlib.asynccontextmanager
async def serving_grpc(inferd: InferenceServer) -> AsyncIterator[pb_grpc.GRPCInferenceServiceStub]:
    """``inferd``'s gRPC server running in this event loop, and a grpc.aio stub of it."""
    server = inferd.grpc_server()
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield pb_grpc.GRPCInferenceServiceStub(channel)
    finally:
        await server.stop(0)


@pytest.fixture
async def stub(inferd: InferenceServer) -> AsyncIterator[pb_grpc.GRPCInferenceServiceStub]:
    """A grpc.aio stub of ``inferd``'s gRPC server, running in this event loop."""
    async with serving_grpc(inferd) as stub:
        yield stub


def tensor(name: str, datatype: str, data: Any, shape: list[int] | None = None) -> dict[str, Any]:
    """A JSON input tensor; its shape is the data's unless given."""
    return {
        "name": name,
        "datatype": datatype,
        "shape": shape if shape is not None else list(np.shape(data)),
        "data": data,
    }
