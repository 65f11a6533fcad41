"""Dispatch through a bounded queue to the pool's free slots, grouped by a batch policy.

The policy of every model version without sequence batching. It never has more
batches in flight than the pool can run at once for the instance (its capacity:
the free slots of the workers that hold it); past that, requests wait in the
version's :class:`~inferd.dispatch.queueing.RequestQueue` (priorities, a bound,
deadlines). A request that finds a free slot and nobody waiting goes straight to
the pool, with no task, thread or queue in between. A finished batch hands its
slot to the next batch by starting it itself, before it goes on to answer its own
clients: a worker is not left idle for a trip round the event loop. Which worker
runs a batch is the pool's choice (the least loaded one that holds the model).

Which requests run together, and when, is the version's
:class:`~inferd.dispatch.batch_policy.BatchPolicy`: with adaptive batching
(``max_batch_size`` > 1), what waits when a slot frees is merged into one batch
of up to ``max_batch_size`` rows (:mod:`inferd.dispatch.batching`); while other batches
run, a partial batch may wait ``max_batch_time`` for company.

The slot contract with the pool is :class:`~inferd.workers.base.Execution`: each
request started holds one slot until its execution says the slot is free.

A capacity of 0 while the pool restarts the instance's workers (its last worker
died) is waited for as a busy pool is: requests queue, within the bound and their
timeouts, for at most :data:`RESTART_WAIT_SECONDS` from the start of that wait; an
instance the pool gave up (or never had) refuses them at once with the pool's reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from inferd.context import Disconnected, RequestContext
from inferd.dispatch.batch_policy import batch_policy_of
from inferd.dispatch.batching import merge, share_batch
from inferd.dispatch.grants import ClientGone, Grant, run_in_slot
from inferd.dispatch.launch import Launcher
from inferd.dispatch.policy import unloading_error
from inferd.dispatch.queueing import (
    Pending,
    QueuePolicy,
    RequestQueue,
    deadline_error,
    request_priority,
    request_timeout,
)
from inferd.dispatch.sequences import warn_unrouted
from inferd.dispatch.stream_limit import StreamLimit
from inferd.observability.stats import rows_of
from inferd.observability.trace_record import RequestTrace
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import Call, Execution, ResponseStream

# Longest requests wait for a restarting instance's first worker, as a retried request
# waits for a free slot (workers/worker_assignment.py RETRY_WAIT): then, refused.
RESTART_WAIT_SECONDS = 30.0


class QueuedDispatch:
    """The queue, the batch policy and the slot count of one model version."""

    def __init__(
        self,
        launcher: Launcher,
        settings: ModelSettings | None,
        notify: Callable[[], None],
        interleaved_streams: bool = False,
        server_max_queue_size: int = 0,
    ) -> None:
        self._launcher = launcher
        # The pool's own method, not the launcher's: read on every request's path.
        self._capacity = launcher.pool.capacity
        self._restarting = launcher.pool.restarting
        # When requests began to wait for a restart (None: capacity, or no wait), and
        # the timer that lets them through to the pool's refusal once that is too long.
        self._restart_wait_began: float | None = None
        self._restart_overdue: asyncio.TimerHandle | None = None
        self._instance_id = launcher.instance_id
        self._notify = notify  # when it may have become idle
        self._in_flight = 0
        self._batch_policy = batch_policy_of(settings)
        self._label = settings.label if settings is not None else "the model"
        # The version's own queue bound, or the server's when its settings set none.
        policy = QueuePolicy.of(settings, server_max_queue_size)
        self._queue = RequestQueue(policy, self._batch_policy, self._label, time.monotonic)
        self._hold_timer: asyncio.TimerHandle | None = None
        self._closing = False
        # Logged that requests name sequences it does not route.
        self._told_unrouted = False
        # Streams of an async-generator predict_stream hold no slot; a limit bounds them.
        self._interleaved = (
            StreamLimit(settings, self._label, notify) if interleaved_streams else None
        )
        launcher.pool.watch(launcher.instance_id, self._capacity_changed)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def open_streams(self) -> int:
        return self._interleaved.open if self._interleaved is not None else 0

    @property
    def idle(self) -> bool:
        return not (self._in_flight or self._queue or self.open_streams)

    async def submit(self, request: InferenceRequest, context: RequestContext) -> InferenceResponse:
        """``context.disconnected`` is watched only if the request has to queue: a
        client that leaves meanwhile takes its request out of the queue (ClientGone)."""
        if self._closing:
            raise unloading_error()
        capacity = self._capacity(self._instance_id)
        trace = context.trace
        if self._batch_policy.admit(self._in_flight, capacity, len(self._queue)):
            if request.parameters:
                self._check_queue_parameters(request)
            self._in_flight += 1
            queued = dispatched = time.perf_counter_ns()
            execution = self._launcher.predict_one(request, trace)
            response = await run_in_slot(execution, self._release_slot)
        elif capacity == 0 and not self._waits_for_restart():
            # No worker can run it now: the pool refuses it with the reason.
            call = Call(self._instance_id, request)
            return await self._launcher.predict(call).result()
        else:
            queued = time.perf_counter_ns()
            grant = await self._wait_for_slot(request, context.disconnected, trace=trace)
            dispatched = time.perf_counter_ns()
            assert grant.execution is not None  # a request's grant carries its execution
            if grant.owns_slot:
                response = await run_in_slot(grant.execution, self._release_slot)
            else:
                response = await grant.execution.result()
        self._launcher.ran(queued, dispatched, trace)
        return response

    async def open_stream(
        self, request: InferenceRequest, context: RequestContext
    ) -> ResponseStream:
        """A plain generator's stream waits for a slot as a request does (never merged
        into a batch) and holds it until the generator has stopped; an interleaved
        one starts at once, up to ``max_concurrent_streams``."""
        if self._interleaved is None:
            return await self._stream_in_slot(request, context)
        self._interleaved.check()
        if request.parameters:
            self._check_queue_parameters(request)
        responses = self._interleaved.started(self._launcher.stream(request))
        self._launcher.count(rows_of(request.inputs), 1)
        return responses

    def closing(self) -> None:
        """Refuse new requests; what waits in the queue still runs."""
        self._closing = True

    def closed(self) -> None:
        """Nothing kept past the last request."""
        self._restart_wait_ended()

    async def _stream_in_slot(
        self, request: InferenceRequest, context: RequestContext
    ) -> ResponseStream:
        capacity = self._capacity(self._instance_id)
        if not self._queue and self._in_flight < capacity:
            if request.parameters:
                self._check_queue_parameters(request)
            self._in_flight += 1
            try:
                return self._start_stream(request)
            except BaseException:
                self._release_slot()
                raise
        if capacity == 0 and not self._waits_for_restart():
            return self._launcher.stream(request)  # refused, with the reason
        grant = await self._wait_for_slot(request, context.disconnected, streams=True)
        assert grant.stream is not None  # a stream's grant carries it
        return grant.stream

    def _start_stream(self, request: InferenceRequest) -> ResponseStream:
        """Start a stream in a slot already taken; the slot is free when it finishes."""
        responses = self._launcher.stream(request)
        self._launcher.count(rows_of(request.inputs), 1)
        responses.finished.add_done_callback(lambda _: self._release_slot())
        return responses

    def _check_queue_parameters(self, request: InferenceRequest) -> None:
        policy = self._queue.policy
        request_priority(request, policy.default_priority_level)
        request_timeout(request, policy.timeout)
        if not self._told_unrouted and request.parameters.get("sequence_id"):
            self._told_unrouted = warn_unrouted(self._label)

    async def _wait_for_slot(
        self,
        request: InferenceRequest,
        disconnected: Disconnected | None,
        streams: bool = False,
        trace: RequestTrace | None = None,
    ) -> Grant:
        loop = asyncio.get_running_loop()
        pending = self._queue.pending(request, streams)
        slot: asyncio.Future[Grant] = loop.create_future()
        pending.waiter = slot
        pending.trace = trace
        self._queue.push(pending)  # Overloaded when full
        if pending.deadline is not None:
            try:
                pending.timer = loop.call_later(
                    pending.deadline - time.monotonic(), self._expire, pending
                )
            except BaseException:
                self._leave_queue(pending)  # never leave a request nobody waits for
                raise
        self._hand_out_slots()  # a slot may be free while a partial batch waited
        try:
            if disconnected is None or slot.done():
                return await slot
            return await self._slot_unless_gone(slot, pending, disconnected)
        except asyncio.CancelledError:
            if slot.done() and not slot.cancelled():
                slot.result().abandon(self._release_slot)  # started as we were cancelled
            else:
                self._leave_queue(pending)
            raise

    async def _slot_unless_gone(
        self, slot: asyncio.Future[Grant], pending: Pending, disconnected: Disconnected
    ) -> Grant:
        watcher = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait((slot, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if slot.done():  # started (or failed) before the client left: it stands
            return slot.result()
        self._leave_queue(pending)
        slot.cancel()
        raise ClientGone("The client disconnected while its request was queued")

    def _leave_queue(self, pending: Pending) -> None:
        if pending.timer is not None:
            pending.timer.cancel()
        self._queue.remove(pending)
        self._notify()

    def _expire(self, pending: Pending) -> None:
        if self._queue.remove(pending) and not pending.waiter.done():
            pending.waiter.set_exception(deadline_error(pending, time.monotonic()))
        self._notify()

    def _release_slot(self) -> None:
        self._in_flight -= 1
        if self._queue:
            self._hand_out_slots()
        else:
            self._notify()

    def _hand_out_slots(self) -> None:
        capacity = self._capacity(self._instance_id)
        if capacity == 0 and not self._waits_for_restart():
            # Nothing will free a slot: let every waiter through to get the pool's error.
            capacity = self._in_flight + len(self._queue)
        for pending in self._queue.pop_expired():
            _settle_expired(pending)
        while self._queue and self._in_flight < capacity:
            batch, held_until = self._queue.next_batch(self._in_flight)
            if held_until is not None:
                self._hold(held_until)
                return
            batch = [p for p in batch if _still_waiting(p)]
            if batch:
                self._in_flight += 1
                self._start(batch)
        self._notify()

    def _hold(self, until: float) -> None:
        """Look again when the waiting partial batch may wait no longer."""
        if self._hold_timer is not None:
            return
        delay = max(0.0, until - time.monotonic())
        self._hold_timer = asyncio.get_running_loop().call_later(delay, self._hold_over)

    def _hold_over(self) -> None:
        self._hold_timer = None
        if self._queue:
            self._hand_out_slots()

    def _start(self, batch: list[Pending]) -> None:
        if batch[0].streams:  # a stream always leaves the queue alone
            self._start_queued_stream(batch[0])
            return
        rows = sum(p.rows or rows_of(p.request.inputs) for p in batch)
        traces = (p.trace for p in batch)
        if len(batch) == 1:
            execution = self._launcher.predict_batch(batch[0].request, traces, rows, 1)
            batch[0].waiter.set_result(Grant(execution, owns_slot=True))
            return
        requests = [pending.request for pending in batch]
        merged = self._launcher.predict_batch(merge(requests), traces, rows, len(batch))
        running = merged.as_future()
        shares = share_batch(running, requests, [p.rows or 0 for p in batch], self._release_slot)
        for pending, share in zip(batch, shares, strict=True):
            pending.waiter.set_result(Grant(Execution.sent(share), owns_slot=False))

    def _start_queued_stream(self, pending: Pending) -> None:
        try:
            responses = self._start_stream(pending.request)
        except Exception as error:  # could not start: the waiter gets why, the slot is free
            pending.waiter.set_exception(error)
            self._release_slot()
            return
        pending.waiter.set_result(Grant(None, owns_slot=True, stream=responses))

    def _capacity_changed(self) -> None:
        if self._capacity(self._instance_id):
            self._restart_wait_ended()
        if self._queue:
            self._hand_out_slots()

    def _waits_for_restart(self) -> bool:
        """With no capacity: whether requests wait for the instance's workers to come
        back (the pool restarts them, and the wait is not too long yet)."""
        if not self._restarting(self._instance_id):
            self._restart_wait_ended()
            return False
        now = time.monotonic()
        if self._restart_wait_began is None:
            self._restart_wait_began = now
            self._restart_overdue = asyncio.get_running_loop().call_later(
                RESTART_WAIT_SECONDS, self._capacity_changed
            )
        return now - self._restart_wait_began < RESTART_WAIT_SECONDS

    def _restart_wait_ended(self) -> None:
        self._restart_wait_began = None
        if self._restart_overdue is not None:
            self._restart_overdue.cancel()
            self._restart_overdue = None


def _still_waiting(pending: Pending) -> bool:
    """Whether anyone still waits for this request (its client may have gone)."""
    if pending.timer is not None:
        pending.timer.cancel()
    return not pending.waiter.done()


def _settle_expired(pending: Pending) -> None:
    if pending.timer is not None:
        pending.timer.cancel()
    if not pending.waiter.done():
        pending.waiter.set_exception(deadline_error(pending, time.monotonic()))
