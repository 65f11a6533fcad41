"""Per-model-version dispatch from the main process to the pool.

One :class:`Scheduler` exists per loaded model version: the one dispatcher
whatever the version's dispatch policy (:mod:`inferd.dispatch.policy`). It
refuses requests once the version is being unloaded, waits for those taken on
to finish, and reads streams out. When and where each request starts is the
policy's:
:class:`~inferd.dispatch.queued.QueuedDispatch` (a bounded queue before the
pool's free slots, with adaptive batching or none) or, for a version with
``sequence_batching``, :class:`~inferd.dispatch.sequence_dispatch.SequenceDispatch`.
Both start their calls through one :class:`~inferd.dispatch.launch.Launcher`,
which counts executions, notes traced batches and records each request's wait
and run in the version's ModelStats (bound when the version loaded) and trace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Coroutine
from typing import Any

from inferd.context import NO_CONTEXT, RequestContext
from inferd.dispatch.grants import ClientGone
from inferd.dispatch.launch import Launcher
from inferd.dispatch.policy import DispatchPolicy, unloading_error
from inferd.dispatch.queued import QueuedDispatch
from inferd.dispatch.sequence_dispatch import SequenceDispatch
from inferd.observability.stats import ModelStats
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import Pool, taken

__all__ = ["ClientGone", "Scheduler"]


class Scheduler:
    def __init__(
        self,
        pool: Pool,
        instance_id: int,
        settings: ModelSettings | None = None,
        stats: ModelStats | None = None,
        interleaved_streams: bool = False,
        server_max_queue_size: int = 0,
    ) -> None:
        self.instance_id = instance_id
        self._closed = False
        self._drained: asyncio.Event | None = None
        self._launcher = launcher = Launcher(pool, instance_id, stats)
        self.policy: DispatchPolicy
        if settings is not None and settings.sequence_batching is not None:
            self.policy = SequenceDispatch(
                launcher, settings, self._notify_if_drained, server_max_queue_size
            )
        else:
            self.policy = QueuedDispatch(
                launcher,
                settings,
                self._notify_if_drained,
                interleaved_streams,
                server_max_queue_size,
            )

    @property
    def in_flight(self) -> int:
        return self.policy.in_flight

    @property
    def waiting(self) -> int:
        return self.policy.waiting

    @property
    def busy(self) -> bool:
        """Whether a request or stream runs or waits, or a sequence is open."""
        policy = self.policy
        return not policy.idle or bool(getattr(policy, "open_sequences", 0))

    @property
    def open_streams(self) -> int:
        """Streams running that hold no slot (those that do are in ``in_flight``)."""
        return self.policy.open_streams

    def submit(
        self, request: InferenceRequest, context: RequestContext = NO_CONTEXT
    ) -> Coroutine[Any, Any, InferenceResponse]:
        """Run ``request``; record its wait and execution when it succeeds.

        ``context.disconnected`` is watched only if the request has to queue: a
        client that leaves meanwhile takes its request out of the queue (ClientGone).
        The policy's coroutine itself, which refuses the request once the scheduler
        is closing: no coroutine of the scheduler's own on every request's path.
        """
        return self.policy.submit(request, context)

    async def stream(
        self, request: InferenceRequest, context: RequestContext = NO_CONTEXT
    ) -> AsyncGenerator[list[InferenceResponse], None]:
        """Run ``predict_stream``: its responses as the model yields them, in lists of
        those ready together (:meth:`ResponseStream.take`). Whoever stops reading (a
        client that left) stops the generator where it runs."""
        if self._closed:
            raise unloading_error()
        queued = time.perf_counter_ns()
        responses = await self.policy.open_stream(request, context)
        dispatched = time.perf_counter_ns()
        try:
            async for ready in taken(responses):
                yield ready
        finally:
            responses.cancel()
        self._launcher.streamed(queued, dispatched)

    async def close(self) -> None:
        """Stop taking requests; wait until those already taken on have finished."""
        self._closed = True
        self.policy.closing()
        if not self.policy.idle:
            self._drained = asyncio.Event()
            await self._drained.wait()
        self.policy.closed()

    def _notify_if_drained(self) -> None:
        if self._drained is not None and self.policy.idle:
            self._drained.set()
