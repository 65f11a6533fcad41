"""Where this process's runtimes, and its worker processes' runtimes, call models.

Runtimes in this process call its dataplane directly (``model_calls.serve_calls``).
The dataplane is also served to its worker processes on a private unix socket
with the model host's edge (``host/edge.py``: ``LOAD (name, version)``,
``PREDICT``, ``STREAM`` run on this dataplane), its path in the environment the
workers inherit (``workers/calls_client.py`` connects to it).

With protocol processes (docs/design.md "Models that call models"), each protocol
process serves its dataplane to the model host the same way, on ``calls-<i>.sock``
(``RoleProcess.calls_socket``); the host calls there the models it does not
hold (copied into the protocol processes, ``RoleProcess.calls_elsewhere``):
its own runtimes through :class:`HostCalls`, its workers by binding on the first
socket that holds the model (the host's own first).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from inferd import model_calls
from inferd.context import RequestContext
from inferd.host.edge import close_host, serve_host
from inferd.server.protocol_role import bind_unix
from inferd.server.roles import RoleProcess
from inferd.serving.dataplane import DataPlane
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.calls_client import SOCKET_VARIABLE, ServerCalls, socket_variable, spread


@contextlib.asynccontextmanager
async def model_calls_served(
    dataplane: DataPlane, role: RoleProcess | None = None
) -> AsyncIterator[None]:
    """Serve model calls while the server runs (enter it before the workers start)."""
    elsewhere = list(role.calls_elsewhere) if role is not None else []
    others = ServerCalls(spread(elsewhere)) if elsewhere else None
    model_calls.serve_calls(dataplane if others is None else HostCalls(dataplane, others))
    folder = None
    if role is not None and role.calls_socket is not None:
        path = role.calls_socket  # also the model host's way to this process's models
    else:
        folder = tempfile.mkdtemp(prefix="inferd-calls-")
        path = Path(folder) / "calls.sock"
    server = None
    try:
        server = await serve_host(dataplane, bind_unix(path))
        # Worker processes (a model's own `workers`, parallel_workers) inherit it.
        os.environ[SOCKET_VARIABLE] = socket_variable([path, *elsewhere])
        yield
    finally:
        model_calls.serve_calls(None)
        if server is not None:
            close_host(server)
        os.environ.pop(SOCKET_VARIABLE, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if others is not None:
            await others.close()


class HostCalls:
    """The model host's caller: a model it holds runs on its dataplane, any other on a
    protocol process's (each holds a copy of the models the host does not)."""

    def __init__(self, dataplane: DataPlane, elsewhere: ServerCalls) -> None:
        self._dataplane = dataplane
        self._elsewhere = elsewhere

    def _caller(self, name: str) -> model_calls.ModelCaller:
        held = any(True for _ in self._dataplane.registry.versions_of(name))
        return self._dataplane if held else self._elsewhere

    async def infer(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> InferenceResponse:
        return await self._caller(name).infer(name, version, request, context)

    def infer_stream(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> AsyncIterator[list[InferenceResponse]]:
        return self._caller(name).infer_stream(name, version, request, context)
