"""Per-model-version dispatch from the main process to the pool.

One :class:`Scheduler` exists per loaded model version. It never has more
batches in flight than the pool can run at once for that instance (its
capacity: the free slots of the workers that hold it); past that, requests wait
in the version's :class:`~inferd.queueing.RequestQueue` (priorities, a bound,
deadlines). A request that finds a free slot and nobody waiting goes straight to
the pool, with no task, thread or queue in between. A finished batch hands its
slot to the next batch by starting it itself, before it goes on to answer its own
clients: a worker is not left idle for a trip round the event loop. Which worker
runs a batch is the pool's choice (the least loaded one that holds the model).

With adaptive batching (``max_batch_size`` > 1), what waits when a slot frees is
merged into one batch of up to ``max_batch_size`` rows (:mod:`inferd.batching`);
while other batches run, a partial batch may wait ``max_batch_time`` for company.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from .batching import merge, split
from .errors import DeadlineExceeded, ModelNotReady
from .queueing import Pending, QueuePolicy, RequestQueue, request_priority, request_timeout
from .settings import ModelSettings
from .stats import ModelStats, rows_of
from .types import InferenceRequest, InferenceResponse
from .workers.base import Pool

Started = Awaitable[InferenceResponse]
# What a waiter gets once its batch has started: its own answer to await, and whether
# it holds the batch's slot (a batch of one) or the batch releases it (a real batch).
Slot = tuple[Started, bool]
BatchListener = Callable[[int, int], None]
# Resolves when the client has gone away (an HTTP disconnect); watched only while queued.
Disconnected = Callable[[], Awaitable[object]]


class ClientGone(ConnectionAbortedError):
    """The client left while its request waited in the queue; it was never run."""


class Scheduler:
    def __init__(self, pool: Pool, instance_id: int, settings: ModelSettings | None = None) -> None:
        self._pool = pool
        self.instance_id = instance_id
        self._in_flight = 0
        self._queue = RequestQueue(_policy(settings), _label(settings), time.monotonic)
        self._hold_timer: asyncio.TimerHandle | None = None
        # Whether a request that finds a free slot while others run waits for company.
        policy = self._queue.policy
        self._holds = policy.batching and policy.max_batch_time > 0
        self._closed = False
        self._drained: asyncio.Event | None = None
        # Metrics hook: called with (rows, requests) for every batch sent to the pool.
        self.on_batch: BatchListener | None = None
        pool.watch(instance_id, self._capacity_changed)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def queue_size(self) -> int:
        return len(self._queue)

    async def submit(
        self,
        request: InferenceRequest,
        stats: ModelStats | None = None,
        disconnected: Disconnected | None = None,
    ) -> InferenceResponse:
        """Run ``request``; with ``stats``, record its wait and execution when it succeeds.

        ``disconnected`` is watched only if the request has to queue: a client that
        leaves meanwhile takes its request out of the queue (ClientGone).
        """
        if self._closed:
            raise ModelNotReady("The model is being unloaded; retry the request")
        capacity = self._pool.capacity(self.instance_id)
        if not self._queue and self._in_flight < capacity and not (self._in_flight and self._holds):
            if request.parameters:
                self._check_queue_parameters(request)
            self._in_flight += 1
            queued = dispatched = time.perf_counter_ns()
            if self.on_batch is not None:
                self.on_batch(rows_of(request.inputs), 1)
            response = await self._await_started(self._predict(request))
        elif capacity == 0:
            # No worker can run it now; the pool answers with the reason.
            return await self._pool.predict(self.instance_id, request)
        else:
            queued = time.perf_counter_ns()
            started, owns_slot = await self._wait_for_slot(request, disconnected)
            dispatched = time.perf_counter_ns()
            # A batch's answer: the batch gives its slot back when it ends.
            response = await (self._await_started(started) if owns_slot else started)
        if stats is not None:
            stats.waited(dispatched - queued)
            stats.computed(time.perf_counter_ns() - dispatched)
        return response

    async def close(self) -> None:
        """Stop taking requests; wait until those already submitted have finished."""
        self._closed = True
        if self._in_flight or self._queue:
            self._drained = asyncio.Event()
            await self._drained.wait()

    def _check_queue_parameters(self, request: InferenceRequest) -> None:
        policy = self._queue.policy
        request_priority(request, policy.default_priority_level)
        request_timeout(request, policy.timeout)

    async def _wait_for_slot(
        self, request: InferenceRequest, disconnected: Disconnected | None
    ) -> Slot:
        loop = asyncio.get_running_loop()
        pending = self._queue.pending(request)
        slot: asyncio.Future[Slot] = loop.create_future()
        pending.waiter = slot
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
                started, owns_slot = slot.result()
                if owns_slot:
                    self._abandon(started)  # started just as we were cancelled
            else:
                self._leave_queue(pending)
            raise

    async def _slot_unless_gone(
        self, slot: asyncio.Future[Slot], pending: Pending, disconnected: Disconnected
    ) -> Slot:
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
        self._notify_if_drained()

    def _expire(self, pending: Pending) -> None:
        if self._queue.remove(pending) and not pending.waiter.done():
            pending.waiter.set_exception(_deadline_error(pending))
        self._notify_if_drained()

    async def _await_started(self, started: Started) -> InferenceResponse:
        """The answer of a request holding a slot, giving the slot back when it ends.

        A coroutine (in-process runtime) stops when its caller is cancelled. A
        future (a call sent to a worker) does not: the worker goes on, so its slot
        stays taken until the worker answers, or requests would pile up in the
        worker beyond capacity and beyond the queue's bound.
        """
        if not isinstance(started, asyncio.Future):
            try:
                return await started
            finally:
                self._release_slot()
        try:
            response = await asyncio.shield(started)
        except asyncio.CancelledError:
            self._abandon(started)  # frees the slot now if done, else once it is
            raise
        except BaseException:
            self._release_slot()
            raise
        self._release_slot()
        return response

    def _abandon(self, started: Started) -> None:
        """Free the slot of a started request nobody waits for, once it is done."""
        if isinstance(started, asyncio.Future):
            started.add_done_callback(self._release_when_done)
            return
        if asyncio.iscoroutine(started):
            started.close()  # never ran: its slot is free now
        self._release_slot()

    def _release_when_done(self, started: asyncio.Future[InferenceResponse]) -> None:
        if not started.cancelled():
            started.exception()  # retrieved: nobody is left to see it
        self._release_slot()

    def _release_slot(self) -> None:
        self._in_flight -= 1
        if self._queue:
            self._hand_out_slots()
        else:
            self._notify_if_drained()

    def _hand_out_slots(self) -> None:
        capacity = self._pool.capacity(self.instance_id)
        if capacity == 0:
            # Nothing will free a slot: let every waiter through to get the pool's error.
            capacity = self._in_flight + len(self._queue)
        for pending in self._queue.pop_expired():
            _settle_expired(pending)
        while self._queue and self._in_flight < capacity:
            batch = self._queue.next_batch(self._in_flight)
            if not batch:
                self._hold(batch_due=self._queue.hold_until())
                return
            batch = [p for p in batch if _still_waiting(p)]
            if batch:
                self._in_flight += 1
                self._start(batch)
        self._notify_if_drained()

    def _hold(self, batch_due: float | None) -> None:
        """Look again when the waiting partial batch may wait no longer."""
        if self._hold_timer is not None or batch_due is None:
            return
        delay = max(0.0, batch_due - time.monotonic())
        self._hold_timer = asyncio.get_running_loop().call_later(delay, self._hold_over)

    def _hold_over(self) -> None:
        self._hold_timer = None
        if self._queue:
            self._hand_out_slots()

    def _start(self, batch: list[Pending]) -> None:
        if self.on_batch is not None:
            total = sum(p.rows or rows_of(p.request.inputs) for p in batch)
            self.on_batch(total, len(batch))
        if len(batch) == 1:
            batch[0].waiter.set_result((self._predict(batch[0].request), True))
            return
        requests = [pending.request for pending in batch]
        running = asyncio.ensure_future(self._predict(merge(requests)))
        answers: list[asyncio.Future[InferenceResponse]] = []
        for pending in batch:
            answer: asyncio.Future[InferenceResponse] = running.get_loop().create_future()
            answers.append(answer)
            pending.waiter.set_result((answer, False))
        rows = [pending.rows or 0 for pending in batch]
        running.add_done_callback(lambda done: self._batch_done(done, requests, rows, answers))

    def _batch_done(
        self,
        running: asyncio.Future[InferenceResponse],
        requests: list[InferenceRequest],
        rows: list[int],
        answers: list[asyncio.Future[InferenceResponse]],
    ) -> None:
        self._release_slot()  # the next batch starts before these clients are answered
        try:
            responses = split(running.result(), requests, rows)
        except BaseException as error:  # the model's error (or a cancellation) for each
            for answer in answers:
                if not answer.done():
                    answer.set_exception(_copy_error(error))
            return
        for answer, response in zip(answers, responses, strict=True):
            if not answer.done():
                answer.set_result(response)

    def _predict(self, request: InferenceRequest) -> Started:
        try:
            return self._pool.predict(self.instance_id, request)
        except Exception as error:  # raised before it started: the waiter gets it
            failed: asyncio.Future[InferenceResponse] = asyncio.get_running_loop().create_future()
            failed.set_exception(error)
            return failed

    def _capacity_changed(self) -> None:
        if self._queue:
            self._hand_out_slots()

    def _notify_if_drained(self) -> None:
        if self._drained is not None and not self._in_flight and not self._queue:
            self._drained.set()


def _policy(settings: ModelSettings | None) -> QueuePolicy:
    if settings is None:
        return QueuePolicy()
    return QueuePolicy(
        max_batch_rows=settings.max_batch_size,
        max_batch_time=settings.max_batch_time,
        max_size=settings.max_queue_size,
        timeout=settings.timeout or None,
        default_priority_level=settings.default_priority_level,
    )


def _label(settings: ModelSettings | None) -> str:
    if settings is None:
        return "the model"
    if settings.version:
        return f"model {settings.name!r} version {settings.version!r}"
    return f"model {settings.name!r}"


def _still_waiting(pending: Pending) -> bool:
    """Whether anyone still waits for this request (its client may have gone)."""
    if pending.timer is not None:
        pending.timer.cancel()
    return not pending.waiter.done()


def _settle_expired(pending: Pending) -> None:
    if pending.timer is not None:
        pending.timer.cancel()
    if not pending.waiter.done():
        pending.waiter.set_exception(_deadline_error(pending))


def _deadline_error(pending: Pending) -> DeadlineExceeded:
    waited = time.monotonic() - pending.arrived
    return DeadlineExceeded(
        f"The request waited {waited:.3f}s in the queue, past its timeout, and was not run; "
        "retry later, or raise its 'timeout' parameter (microseconds) or the model's timeout"
    )


def _copy_error(error: BaseException) -> BaseException:
    """Each waiter gets the batch's error; a cancelled batch fails as cancelled."""
    if isinstance(error, asyncio.CancelledError):
        return asyncio.CancelledError()
    return error
