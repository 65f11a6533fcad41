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

The runtime is told when a sequence is over (``Model.sequence_end``, a control
message through the pool): after its request with ``sequence_end`` has run, and
when it expired, idle for ``max_sequence_idle_microseconds`` (a timer looks when
the first idle one is due). A holder that dies takes its sequences with it:
their requests waiting or running fail with WorkerLost (503), later ones with
400, each saying the sequence was lost and why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from inferd.context import RequestContext
from inferd.dispatch.launch import Launcher
from inferd.dispatch.policy import unloading_error
from inferd.dispatch.queueing import QueuePolicy
from inferd.dispatch.sequence_turns import SequenceStream, Turn
from inferd.dispatch.sequences import (
    Clock,
    EndSequence,
    Sequence,
    SequenceTable,
    sequence_control,
)
from inferd.errors import Overloaded, WorkerLost
from inferd.observability.stats import rows_of
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import Execution, Holder, ResponseStream

logger = logging.getLogger(__name__)

WORKER_STOPPED = "the worker process keeping its state stopped; start the sequence again"


@dataclass(slots=True)
class _HolderLoad:
    running: int = 0
    waiting: deque[Turn] = field(default_factory=deque)


class SequenceDispatch:
    """Each request belongs to a sequence, run in order on the holder keeping it."""

    def __init__(
        self,
        launcher: Launcher,
        settings: ModelSettings,
        notify: Callable[[], None],
        server_max_queue_size: int = 0,
        clock: Clock = time.monotonic,
    ) -> None:
        batching = settings.sequence_batching
        assert batching is not None  # the scheduler picks this policy for such settings only
        self._launcher = launcher
        self._notify = notify  # when it may have become idle
        self._slots = settings.threads_per_worker
        self._table = SequenceTable(settings.name, batching.idle_timeout, clock)
        self._clock = clock
        self._name = settings.name
        self._label = settings.label
        self._loads: dict[Holder, _HolderLoad] = {}
        self._max_waiting = QueuePolicy.of(settings, server_max_queue_size).max_size
        self._in_flight = 0
        self._waiting = 0
        self._closing = False
        self._reaper: asyncio.TimerHandle | None = None
        launcher.pool.watch(launcher.instance_id, self._holders_changed)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def open_streams(self) -> int:
        return 0  # a sequence's stream holds a slot: it is in in_flight

    @property
    def idle(self) -> bool:
        return not (self._in_flight or self._waiting)

    @property
    def open_sequences(self) -> int:
        return len(self._table)

    async def submit(self, request: InferenceRequest, context: RequestContext) -> InferenceResponse:
        """Run ``request`` on its sequence's holder, after the sequence's earlier ones."""
        sequence, load, ends = self._admit(request)
        queued = time.perf_counter_ns()
        turn = Turn(sequence, request, ends, False, context.trace)
        if self._may_start(sequence, load):
            self._start_turn(load, turn)
        else:
            await self._wait_turn(load, turn)
        dispatched = time.perf_counter_ns()
        assert turn.execution is not None  # a predict's turn starts with its execution
        response = await self._run(sequence, turn.execution)
        self._launcher.ran(queued, dispatched, context.trace)
        return response

    async def open_stream(
        self, request: InferenceRequest, context: RequestContext
    ) -> ResponseStream:
        """Run ``predict_stream`` on the sequence's holder, after its earlier requests;
        the next request of the sequence starts once this stream has finished."""
        sequence, load, ends = self._admit(request)
        turn = Turn(sequence, request, ends, True)
        if self._may_start(sequence, load):
            self._start_turn(load, turn)
        else:
            await self._wait_turn(load, turn)
        assert turn.stream is not None  # a stream's turn starts with its responses
        return SequenceStream(turn.stream, partial(self._lose, sequence))

    def closing(self) -> None:
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None

    def closed(self) -> None:
        """Forget the open sequences: the runtime is unloaded next, with their state."""
        self._table.close_all()

    def _admit(self, request: InferenceRequest) -> tuple[Sequence, _HolderLoad, bool]:
        """The request's sequence (opened if it starts one), its holder's load, and
        whether the request ends it; raises if the request is refused."""
        if self._closing:
            raise unloading_error()
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
        holders = self._launcher.pool.holders(self._launcher.instance_id)
        if not holders:
            raise WorkerLost(
                f"No worker process holding {self._label} is running right now (it stopped "
                "and is being restarted); start the sequence again shortly"
            )
        holder = min(holders, key=lambda h: (self._table.open_on(h), h))
        self._loads.setdefault(holder, _HolderLoad())
        return holder

    def _start_turn(self, load: _HolderLoad, turn: Turn) -> None:
        """Start the request on the sequence's holder, in a slot of it. A stream that
        cannot start raises (its slot freed); a predict's execution fails instead."""
        sequence = turn.sequence
        self._table.started(sequence)
        load.running += 1
        self._in_flight += 1
        if not turn.streams:
            turn.execution = self._launcher.predict_one(turn.request, turn.trace, sequence.holder)
            return
        self._launcher.count(rows_of(turn.request.inputs), 1)
        try:
            responses = self._launcher.stream(turn.request, sequence.holder)
        except WorkerLost:
            self._table.drop(sequence, WORKER_STOPPED)
            self._finished(sequence)
            raise self._lost(sequence) from None
        except BaseException:
            self._finished(sequence)
            raise
        responses.finished.add_done_callback(lambda _: self._finished(sequence))
        turn.stream = responses

    async def _wait_turn(self, load: _HolderLoad, turn: Turn) -> None:
        waiter = turn.waiter = asyncio.get_running_loop().create_future()
        load.waiting.append(turn)
        self._waiting += 1
        self._hand_out(load)  # a free slot its sequence may take, past others' blocked turns
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # started as we were cancelled
                turn.abandon(partial(self._finished, turn.sequence))
            elif turn in load.waiting:
                load.waiting.remove(turn)
                self._waiting -= 1
                self._table.withdrawn(turn.sequence, turn.ends)
                self._arm_reaper()
                self._notify()
            raise

    async def _run(self, sequence: Sequence, execution: Execution) -> InferenceResponse:
        try:
            response = await execution.result()
        except asyncio.CancelledError:
            execution.when_free(partial(self._finished, sequence))
            raise
        except WorkerLost:
            lost = self._lose(sequence)
            self._finished(sequence)
            raise lost from None
        except BaseException:
            self._finished(sequence)
            raise
        self._finished(sequence)
        return response

    def _lose(self, sequence: Sequence) -> WorkerLost:
        """Its holder died while it ran: the sequence is over; the error to raise."""
        self._table.drop(sequence, WORKER_STOPPED)
        return self._lost(sequence)

    def _finished(self, sequence: Sequence) -> None:
        """A request of the sequence is done: free its slot, start who waits."""
        self._in_flight -= 1
        if self._table.finished(sequence):
            self._end(sequence)
        load = self._loads.get(sequence.holder)
        if load is not None:
            load.running -= 1
            self._hand_out(load)
        self._arm_reaper()
        self._notify()

    def _hand_out(self, load: _HolderLoad) -> None:
        """Start the oldest waiting requests whose sequence is free, while slots are."""
        while load.running < self._slots:
            turn = next((t for t in load.waiting if not t.sequence.busy), None)
            if turn is None:
                return
            load.waiting.remove(turn)
            self._waiting -= 1
            assert turn.waiter is not None
            try:
                self._start_turn(load, turn)
            except Exception as error:  # a stream that could not start; its slot is free
                turn.waiter.set_exception(error)
            else:
                turn.waiter.set_result(None)

    def _holders_changed(self) -> None:
        """A worker died or came back: its sequences are lost if it is not alive."""
        alive = set(self._launcher.pool.holders(self._launcher.instance_id))
        lost = self._table.lose(alive, WORKER_STOPPED)
        for holder in [h for h in self._loads if h not in alive]:
            load = self._loads.pop(holder)
            for turn in load.waiting:
                self._waiting -= 1
                if turn.waiter is not None and not turn.waiter.done():
                    turn.waiter.set_exception(self._lost(turn.sequence))
            # Counted out: a turn cancelled before this, whose task has not run yet, must
            # not find itself waiting there and leave the count again.
            load.waiting.clear()
        if lost:
            ids = ", ".join(str(s.sequence_id) for s in lost[:10])
            more = "..." if len(lost) > 10 else ""
            logger.warning("Sequences of %s lost with their worker: %s%s", self._label, ids, more)
        self._notify()

    def _lost(self, sequence: Sequence) -> WorkerLost:
        where = f" (worker {sequence.holder[0]})" if sequence.holder[0] >= 0 else ""
        return WorkerLost(
            f"Sequence {sequence.sequence_id} of {self._label} was lost: the worker process "
            f"keeping its state{where} stopped. Start the sequence again (sequence_start)."
        )

    def _end(self, sequence: Sequence) -> None:
        """Tell the runtime keeping the sequence that it is over."""
        end = EndSequence(self._launcher.instance_id, sequence.holder, sequence.sequence_id)
        self._launcher.pool.control(end)

    def _arm_reaper(self) -> None:
        if self._reaper is not None or self._closing:
            return
        due = self._table.next_expiry()
        if due is not None:
            delay = max(0.0, due - self._clock())
            self._reaper = asyncio.get_running_loop().call_later(delay, self._reap)

    def _reap(self) -> None:
        self._reaper = None
        for sequence in self._table.expire():
            logger.debug("Sequence %s of %s expired", sequence.sequence_id, self._label)
            self._end(sequence)
        self._arm_reaper()
