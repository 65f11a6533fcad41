"""A worker process's runtimes calling models of their server (BLS, ensembles, context.infer).

A worker has no dataplane of its own. Its server serves one for its workers on a
unix socket (``server/worker_calls.py``, with the model host's edge,
``host/edge.py``), whose path it puts in the workers' environment
(:data:`SOCKET_VARIABLE`); this module registers a
:class:`~inferd.model_calls.ModelCaller` that reaches it through a
:class:`~inferd.host.client.HostClient`, the same client a protocol process
reaches the model host with. A call then runs in the server's process through the
called model's queue and batcher, as a client's request.

In the model host the variable names more sockets after the host's own: the
protocol processes', which hold the models the host does not (copied into each).
A model is bound on the first of them that holds it (:class:`ServerCalls`), so a
hosted model reaches every model of the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from inferd import model_calls
from inferd.context import RequestContext
from inferd.errors import InferdError, ModelNotFound, ModelNotReady, WorkerLost
from inferd.host.client import HostClient
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import taken

# The environment variable naming the sockets a worker's model calls go to, in the
# order they are tried (os.pathsep between them).
SOCKET_VARIABLE = "_INFERD_MODEL_CALLS_SOCKET"


def offer_calls(loop: asyncio.AbstractEventLoop) -> None:
    """In a worker process: let its runtimes call models, when its server offers it."""
    paths = [Path(path) for path in os.environ.get(SOCKET_VARIABLE, "").split(os.pathsep) if path]
    if paths:  # its server's own first, then the protocol processes' (in the model host)
        model_calls.serve_calls(ServerCalls([paths[0], *spread(paths[1:])]), loop)


def spread(paths: Sequence[Path]) -> list[Path]:
    """``paths`` starting at one picked by this process's id: the protocol processes'
    sockets, so that the model host's workers each call a different one first."""
    start = os.getpid() % len(paths) if paths else 0
    return [*paths[start:], *paths[:start]]


def socket_variable(paths: Sequence[Path]) -> str:
    """The value of :data:`SOCKET_VARIABLE` for ``paths``."""
    return os.pathsep.join(str(path) for path in paths)


# A model version bound on one server: the client that reaches it and the instance id.
Bound = tuple[HostClient, int]


class ServerCalls:
    """A ModelCaller over servers' sockets: each model version is bound once to an
    instance id of the first server that holds it (``LOAD (name, version)``), then
    called there."""

    def __init__(self, paths: Sequence[Path]) -> None:
        # No patience: a server that does not answer (a protocol process restarting)
        # is passed over for the next, and tried again at the next bind.
        self._servers = [HostClient(path, patience=0.0) for path in paths]
        self._bound: dict[tuple[str, str | None], Bound] = {}
        self._ids = itertools.count(1)

    async def infer(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> InferenceResponse:
        for attempt in (1, 2):
            server, instance_id = await self._instance(name, version)
            try:
                return await server.infer(instance_id, request)
            except (ModelNotFound, ModelNotReady, WorkerLost):
                # The version bound was unloaded or replaced, or its server is gone:
                # bind the ready one again.
                self._bound.pop((name, version), None)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def infer_stream(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> AsyncIterator[list[InferenceResponse]]:
        server, instance_id = await self._instance(name, version)
        try:
            stream = server.stream(instance_id, request)
        except (ModelNotReady, WorkerLost):
            self._bound.pop((name, version), None)
            raise
        try:
            async for ready in taken(stream):
                yield ready
        finally:
            stream.cancel()

    async def _instance(self, name: str, version: str | None) -> Bound:
        key = (name, version)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bound[key] = await self._bind(name, version)
        return bound

    async def _bind(self, name: str, version: str | None) -> Bound:
        """Bind on the first server that holds the model; raises what the most telling
        refusal said (not found everywhere, or not ready where it is)."""
        refused: InferdError | None = None
        for server in self._servers:
            instance_id = next(self._ids)
            try:
                await server.bind(instance_id, name, version)
                return server, instance_id
            except ModelNotFound as error:  # not held there: maybe by the next
                refused = refused or error
            except (ModelNotReady, WorkerLost) as error:  # there, not ready, or unreachable
                refused = error if isinstance(refused, ModelNotFound | None) else refused
        assert refused is not None
        raise refused

    async def close(self) -> None:
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.close()
