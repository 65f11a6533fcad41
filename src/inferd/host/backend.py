"""The model host's backend (serving/backends.py): versions the model host runs,
answered through a client of its socket (host/client.py).

A protocol process neither queues, batches, caches nor counts such a version's
requests: each goes to the host as it came, where the host's data plane runs it
through the model's one queue, batcher, cache and sequence holder, whichever
process took it. So a hosted request crosses each layer once: this process's
data plane, this backend, the host's edge, the host's data plane and dispatch,
its pool (docs/design.md "The model host").

What stays here is what belongs to the call's way: a version being unloaded
refuses new calls and waits for those under way (the coordinator unloads it in
the protocol processes before the host), a traced request gets the host's record
of its queue wait, batch and worker, and a client that leaves has the host told
(the client's ``Cancel``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator

from inferd.context import RequestContext
from inferd.errors import ModelNotReady
from inferd.host.client import HostClient
from inferd.observability.stats import ModelStats, rows_of
from inferd.observability.trace_record import shared_run
from inferd.serving.backends import Opened
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import Control, taken


def unloading() -> ModelNotReady:
    """What a call gets once its version is being unloaded (as dispatch answers)."""
    return ModelNotReady("The model is being unloaded; retry the request")


class HostBackend:
    """The model host's versions (a :class:`~inferd.serving.backends.Backend`)."""

    where = "in the model host"

    def __init__(self, client: HostClient) -> None:
        self.client = client
        # How many of the host's workers hold each version, as the host said at its bind.
        self._held: dict[int, int] = {}

    async def load(self, instance_id: int, settings: ModelSettings) -> Opened:
        """Bind ``instance_id`` to the version the host has loaded (the coordinator
        has the host load it first)."""
        instance = await self.client.bind(instance_id, settings.name, settings.version)
        self._held[instance_id] = instance.instances or 0
        calls = HostedCalls(self.client, instance_id)
        # Counted in the host: the statistics extension sums the processes' counts.
        return Opened(instance, calls, ModelStats(settings.name, settings.version))

    async def unload(self, instance_id: int) -> None:
        self._held.pop(instance_id, None)
        await self.client.unbind(instance_id)

    def instances(self, instance_id: int, settings: ModelSettings) -> int:
        return self._held.get(instance_id, 0)

    def control(self, message: Control) -> None:
        """Nothing: the host gets what is server-wide (the log level) from the coordinator."""

    async def close(self) -> None:
        await self.client.close()


class HostedCalls:
    """One hosted version's calls (a :class:`~inferd.serving.backends.VersionCalls`)."""

    __slots__ = ("_client", "_closing", "_drained", "_instance_id", "_running")

    def __init__(self, client: HostClient, instance_id: int) -> None:
        self._client = client
        self._instance_id = instance_id
        self._running = 0  # calls and streams under way
        self._closing = False
        self._drained: asyncio.Event | None = None

    @property
    def busy(self) -> bool:
        return self._running > 0

    async def submit(self, request: InferenceRequest, context: RequestContext) -> InferenceResponse:
        if self._closing:
            raise unloading()
        trace = context.trace
        self._running += 1
        try:
            if trace is None:
                return await self._client.infer(
                    self._instance_id, request, None, context.disconnected
                )
            # The host's batch becomes this request's (its spans show the host's wait).
            sent = time.perf_counter_ns()
            run = shared_run((trace,), rows_of(request.inputs), 1)
            response = await self._client.infer(
                self._instance_id, request, run, context.disconnected
            )
            trace.ran(sent, sent, time.perf_counter_ns())
            return response
        finally:
            self._ended()

    async def stream(
        self, request: InferenceRequest, context: RequestContext
    ) -> AsyncGenerator[list[InferenceResponse], None]:
        if self._closing:
            raise unloading()
        responses = self._client.stream(self._instance_id, request)
        self._running += 1
        try:
            async for ready in taken(responses):
                yield ready
        finally:
            responses.cancel()  # a reader that left stops the generator in the host
            self._ended()

    async def close(self) -> None:
        self._closing = True
        if self._running:
            self._drained = asyncio.Event()
            await self._drained.wait()

    def _ended(self) -> None:
        self._running -= 1
        if self._drained is not None and not self._running:
            self._drained.set()
