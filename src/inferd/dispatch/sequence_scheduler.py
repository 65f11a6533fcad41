"""Dispatch for a model version with ``sequence_batching`` (Triton's sequence batcher).

Every request names its sequence (:mod:`inferd.dispatch.sequences`). A sequence is placed,
when it starts, on the live holder (worker process) keeping the fewest open
sequences, and every later request of it runs there: its state lives in that
process. Requests of one sequence run one at a time, in the order they arrived
(a request is admitted before the first ``await`` of its call, so requests read
in order from one gRPC stream keep that order); requests of different sequences
on one holder share its ``threads_per_worker`` slots, first come first served
among those whose sequence is not running. A ``predict_stream`` call of a
sequence runs there too and holds the sequence (and a slot) until it has
finished. Requests are never merged into batches here, and never retried on
another worker.

The runtime is told when a sequence is over (``Model.sequence_end``, through the
pool): after its request with ``sequence_end`` has run, and when it expired,
idle for ``max_sequence_idle_microseconds`` (a timer looks when the first idle one
is due). A holder that dies takes its sequences with it: their requests waiting
or running fail with WorkerLost (503), later ones with 400, each saying the
sequence was lost and why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from functools import partial

from inferd.context import NO_CONTEXT, RequestContext
from inferd.dispatch.queueing import QueuePolicy
from inferd.dispatch.scheduler import Scheduler
from inferd.dispatch.sequences import Clock, Sequence, SequenceTable, sequence_control
from inferd.errors import ModelNotReady, Overloaded, WorkerLost
from inferd.observability.stats import ModelStats, rows_of
from inferd.observability.trace_record import RequestTrace, shared_run
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import Execution, Holder, Pool, ResponseStream

logger = logging.getLogger(__name__)

WORKER_STOPPED = "the worker process keeping its state stopped; start the sequence again"


# What a request gets when it starts: a predict's execution, or a stream's responses.
Started = Execution | ResponseStream


@dataclass(slots=True, eq=False)
class _Turn:
    """A request waiting for its sequence to be free and a slot of its holder."""

    sequence: Sequence
    request: InferenceRequest
    ends: bool
    streams: bool  # a predict_stream call
    waiter: asyncio.Future[Started]
    trace: RequestTrace | None = None  # a traced predict's: its times are noted


@dataclass(slots=True)
class _HolderLoad:
    running: int = 0
    waiting: deque[_Turn] = field(default_factory=deque)


class SequenceScheduler(Scheduler):
    """A :class:`Scheduler` whose requests each belong to a sequence kept on one holder."""

    def __init__(
        self,
        pool: Pool,
        instance_id: int,
        settings: ModelSettings,
        stats: ModelStats | None = None,
        interleaved_streams: bool = False,
        server_max_queue_size: int = 0,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__(
            pool, instance_id, settings, stats, interleaved_streams, server_max_queue_size
        )
        batching = settings.sequence_batching
        assert batching is not None  # the registry makes this class for such settings only
        self._slots = settings.threads_per_worker
        self._table = SequenceTable(settings.name, batching.idle_timeout, clock)
        self._clock = clock
        self._name = settings.name
        self._loads: dict[Holder, _HolderLoad] = {}
        self._max_waiting = QueuePolicy.of(settings, server_max_queue_size).max_size
        self._waiting = 0
        self._reaper: asyncio.TimerHandle | None = None
        pool.watch(instance_id, self._holders_changed)

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def open_sequences(self) -> int:
        return len(self._table)

    async def submit(
        self, request: InferenceRequest, context: RequestContext = NO_CONTEXT
    ) -> InferenceResponse:
        """Run ``request`` on its sequence's holder, after the sequence's earlier ones."""
        sequence, load, ends = self._admit(request)
        queued = time.perf_counter_ns()
        trace = context.trace
        if self._may_start(sequence, load):
            execution = self._start_turn(sequence, load, request, streams=False, trace=trace)
        else:
            execution = await self._wait_turn(
                sequence, load, request, ends, streams=False, trace=trace
            )
        assert isinstance(execution, Execution)
        dispatched = time.perf_counter_ns()
        response = await self._run(sequence, execution)
        if self._stats is not None:
            self._stats.waited(dispatched - queued)
            self._stats.computed(time.perf_counter_ns() - dispatched)
        if trace is not None:  # its spans, as Scheduler.submit notes them
            trace.ran(queued, dispatched, time.perf_counter_ns())
        return response

    async def stream(
        self, request: InferenceRequest, context: RequestContext = NO_CONTEXT
    ) -> AsyncGenerator[list[InferenceResponse], None]:
        """Run ``predict_stream`` on the sequence's holder, after its earlier requests;
        the next request of the sequence starts once this stream has finished."""
        sequence, load, ends = self._admit(request)
        queued = time.perf_counter_ns()
        if self._may_start(sequence, load):
            responses = self._start_turn(sequence, load, request, streams=True)
        else:
            responses = await self._wait_turn(sequence, load, request, ends, streams=True)
        assert not isinstance(responses, Execution)
        dispatched = time.perf_counter_ns()
        try:
            while True:
                try:
                    ready = await responses.take()
                except StopAsyncIteration:
                    break
                except WorkerLost:
                    self._table.drop(sequence, WORKER_STOPPED)
                    raise self._lost(sequence) from None
                yield ready
        finally:
            responses.cancel()
        if self._stats is not None:
            self._stats.waited(dispatched - queued)
            self._stats.computed(time.perf_counter_ns() - dispatched)

    async def close(self) -> None:
        """Stop taking requests, wait for those admitted, forget the open sequences
        (the runtime is unloaded next, with their state)."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        if self._in_flight or self._waiting:
            self._drained = asyncio.Event()
            await self._drained.wait()
        self._table.close_all()

    def _admit(self, request: InferenceRequest) -> tuple[Sequence, _HolderLoad, bool]:
        """The request's sequence (opened if it starts one), its holder's load, and
        whether the request ends it; raises if the request is refused."""
        if self._closed:
            raise ModelNotReady("The model is being unloaded; retry the request")
        control = sequence_control(request.parameters, self._name)
        if self._max_waiting and self._waiting >= self._max_waiting:
            raise Overloaded(
                f"The queue of {self._label} is full ({self._max_waiting} requests waiting); "
                "retry later, or raise max_queue_size"
            )
        sequence = self._table.admit(control, self._place)
        return sequence, self._loads[sequence.holder], control.end

    def _may_start(self, sequence: Sequence, load: _HolderLoad) -> bool:
        """Whether a request admitted now starts at once (nobody waits before it)."""
        return not load.waiting and load.running < self._slots and not sequence.busy

    def _place(self) -> Holder:
        """The holder for a new sequence: the live one keeping the fewest."""
        holders = self._pool.holders(self.instance_id)
        if not holders:
            raise WorkerLost(
                f"No worker process holding {self._label} is running right now (it stopped "
                "and is being restarted); start the sequence again shortly"
            )
        holder = min(holders, key=lambda h: (self._table.open_on(h), h))
        self._loads.setdefault(holder, _HolderLoad())
        return holder

    def _start_turn(
        self,
        sequence: Sequence,
        load: _HolderLoad,
        request: InferenceRequest,
        streams: bool,
        trace: RequestTrace | None = None,
    ) -> Started:
        """Start the request on the sequence's holder, in a slot of it. A stream that
        cannot start raises (its slot freed); a predict's execution fails instead.
        With ``trace``, the pool notes where and when predict ran (a batch of one)."""
        self._table.started(sequence)
        load.running += 1
        self._in_flight += 1
        rows = rows_of(request.inputs)
        if self._stats is not None:
            self._stats.executed(rows, 1)
        if streams:
            return self._start_sequence_stream(sequence, request)
        try:
            if trace is not None:
                run = shared_run((trace,), rows, 1)
                return self._pool.predict_on(self.instance_id, sequence.holder, request, run)
            return self._pool.predict_on(self.instance_id, sequence.holder, request)
        except Exception as error:  # could not start: the caller gets why
            return Execution.failed(error)

    def _start_sequence_stream(
        self, sequence: Sequence, request: InferenceRequest
    ) -> ResponseStream:
        try:
            responses = self._pool.stream_on(self.instance_id, sequence.holder, request)
        except WorkerLost:
            self._table.drop(sequence, WORKER_STOPPED)
            self._finished(sequence)
            raise self._lost(sequence) from None
        except BaseException:
            self._finished(sequence)
            raise
        responses.finished.add_done_callback(lambda _: self._finished(sequence))
        return responses

    async def _wait_turn(
        self,
        sequence: Sequence,
        load: _HolderLoad,
        request: InferenceRequest,
        ends: bool,
        streams: bool,
        trace: RequestTrace | None = None,
    ) -> Started:
        waiter: asyncio.Future[Started] = asyncio.get_running_loop().create_future()
        turn = _Turn(sequence, request, ends, streams, waiter, trace)
        load.waiting.append(turn)
        self._waiting += 1
        self._hand_out(load)  # a free slot its sequence may take, past others' blocked turns
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # started as we were cancelled
                _abandon(waiter, partial(self._finished, sequence))
            elif turn in load.waiting:
                load.waiting.remove(turn)
                self._waiting -= 1
                self._table.withdrawn(sequence, ends)
                self._arm_reaper()
                self._notify_if_drained()
            raise

    async def _run(self, sequence: Sequence, execution: Execution) -> InferenceResponse:
        try:
            response = await execution.result()
        except asyncio.CancelledError:
            execution.when_free(partial(self._finished, sequence))
            raise
        except WorkerLost:
            self._table.drop(sequence, WORKER_STOPPED)
            self._finished(sequence)
            raise self._lost(sequence) from None
        except BaseException:
            self._finished(sequence)
            raise
        self._finished(sequence)
        return response

    def _finished(self, sequence: Sequence) -> None:
        """A request of the sequence is done: free its slot, start who waits."""
        self._in_flight -= 1
        if self._table.finished(sequence):
            self._pool.end_sequence(self.instance_id, sequence.holder, sequence.sequence_id)
        load = self._loads.get(sequence.holder)
        if load is not None:
            load.running -= 1
            self._hand_out(load)
        self._arm_reaper()
        self._notify_if_drained()

    def _hand_out(self, load: _HolderLoad) -> None:
        """Start the oldest waiting requests whose sequence is free, while slots are."""
        while load.running < self._slots:
            turn = next((t for t in load.waiting if not t.sequence.busy), None)
            if turn is None:
                return
            load.waiting.remove(turn)
            self._waiting -= 1
            try:
                started = self._start_turn(
                    turn.sequence, load, turn.request, turn.streams, turn.trace
                )
            except Exception as error:  # a stream that could not start; its slot is free
                turn.waiter.set_exception(error)
            else:
                turn.waiter.set_result(started)

    def _holders_changed(self) -> None:
        """A worker died or came back: its sequences are lost if it is not alive."""
        alive = set(self._pool.holders(self.instance_id))
        lost = self._table.lose(alive, WORKER_STOPPED)
        for holder in [h for h in self._loads if h not in alive]:
            load = self._loads.pop(holder)
            for turn in load.waiting:
                self._waiting -= 1
                if not turn.waiter.done():
                    turn.waiter.set_exception(self._lost(turn.sequence))
        if lost:
            ids = ", ".join(str(s.sequence_id) for s in lost[:10])
            more = "..." if len(lost) > 10 else ""
            logger.warning("Sequences of %s lost with their worker: %s%s", self._label, ids, more)
        self._notify_if_drained()

    def _lost(self, sequence: Sequence) -> WorkerLost:
        where = f" (worker {sequence.holder[0]})" if sequence.holder[0] >= 0 else ""
        return WorkerLost(
            f"Sequence {sequence.sequence_id} of {self._label} was lost: the worker process "
            f"keeping its state{where} stopped. Start the sequence again (sequence_start)."
        )

    def _arm_reaper(self) -> None:
        if self._reaper is not None or self._closed:
            return
        due = self._table.next_expiry()
        if due is not None:
            delay = max(0.0, due - self._clock())
            self._reaper = asyncio.get_running_loop().call_later(delay, self._reap)

    def _reap(self) -> None:
        self._reaper = None
        for sequence in self._table.expire():
            logger.debug("Sequence %s of %s expired", sequence.sequence_id, self._label)
            self._pool.end_sequence(self.instance_id, sequence.holder, sequence.sequence_id)
        self._arm_reaper()

    def _notify_if_drained(self) -> None:
        if self._drained is not None and not (self._in_flight or self._waiting):
            self._drained.set()


def _abandon(waiter: asyncio.Future[Started], release: Callable[[], None]) -> None:
    """A request started as its caller was cancelled: stop it, free its slot when free."""
    if waiter.exception() is not None:
        return  # it never started
    started = waiter.result()
    if isinstance(started, Execution):
        started.when_free(release)
    else:
        started.cancel()  # its slot is freed when it has finished
