"""A worker process's runtimes calling models of their server (BLS, ensembles, context.infer).

A worker has no dataplane of its own. Its server serves one for its workers on a
unix socket (``server/app.py``, with the model host's edge, ``server/host_edge.py``),
whose path it puts in the workers' environment (:data:`SOCKET_VARIABLE`); this
module registers a :class:`~inferd.model_calls.ModelCaller` that reaches it
through a :class:`~inferd.workers.host_client.HostClient`, the same client a
protocol process reaches the model host with. A call then runs in the server's process
through the called model's queue and batcher, as a client's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path

from inferd import model_calls
from inferd.context import RequestContext
from inferd.errors import ModelNotFound, ModelNotReady
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.host_client import HostClient

# The environment variable naming the socket a worker's model calls go to.
SOCKET_VARIABLE = "_INFERD_MODEL_CALLS_SOCKET"


def offer_calls(loop: asyncio.AbstractEventLoop) -> None:
    """In a worker process: let its runtimes call models, when its server offers it."""
    path = os.environ.get(SOCKET_VARIABLE)
    if path:
        model_calls.serve_calls(ServerCalls(Path(path)), loop)


class ServerCalls:
    """A ModelCaller over the server's socket: each model version is bound once to an
    instance id of this connection (``LOAD (name, version)``), then called."""

    def __init__(self, path: Path) -> None:
        self._host = HostClient(path)
        self._bound: dict[tuple[str, str | None], int] = {}
        self._ids = itertools.count(1)

    async def infer(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> InferenceResponse:
        for attempt in (1, 2):
            instance_id = await self._instance(name, version)
            try:
                return await self._host.infer(instance_id, request)
            except (ModelNotFound, ModelNotReady):
                # The version bound was unloaded or replaced: bind the ready one again.
                self._bound.pop((name, version), None)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def infer_stream(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> AsyncIterator[list[InferenceResponse]]:
        instance_id = await self._instance(name, version)
        stream = self._host.stream(instance_id, request)
        try:
            while True:
                try:
                    yield await stream.take()
                except StopAsyncIteration:
                    return
        finally:
            stream.cancel()

    async def _instance(self, name: str, version: str | None) -> int:
        key = (name, version)
        instance_id = self._bound.get(key)
        if instance_id is None:
            instance_id = next(self._ids)
            await self._host.bind(instance_id, name, version)
            self._bound[key] = instance_id
        return instance_id

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._host.close()
