"""The sequence scheduler over a fake pool of two holders: placement, order, slots,
ends and expiry told to the runtime, a holder that dies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from inferd.context import RequestContext
from inferd.dispatch.scheduler import Scheduler
from inferd.dispatch.sequences import EndSequence
from inferd.errors import InvalidRequest, Overloaded, WorkerLost
from inferd.observability.trace_record import RequestTrace
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers.base import Call, Execution, Holder, StreamBase
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio

A: Holder = (0, 1)
B: Holder = (1, 1)


class HolderPool:
    """Two holders; each predict waits until the test finishes it (by its tag)."""

    def __init__(self) -> None:
        self.alive: list[Holder] = [A, B]
        self.listeners: list[Callable[[], None]] = []
        self.running: dict[str, tuple[Holder, asyncio.Future[None]]] = {}
        self.ran: list[tuple[Holder, str]] = []
        self.ended: list[tuple[Holder, Any]] = []
        self.streams: dict[str, FakeStream] = {}

    def watch(self, instance_id: int, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def capacity(self, instance_id: int) -> int:
        return 2 * len(self.alive)

    def restarting(self, instance_id: int) -> bool:
        return False

    def holders(self, instance_id: int) -> list[Holder]:
        return list(self.alive)

    def predict(self, call: Call) -> Execution:
        holder, run = call.holder, call.run
        assert holder is not None  # a sequence's call names its holder
        if holder not in self.alive:
            raise WorkerLost("that worker stopped")
        tag = str(call.request.parameters["tag"])
        if run is not None:  # a traced request's: say where predict ran, as pools do
            run.predicted(holder[0], 1, 2)
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.running[tag] = (holder, gate)
        self.ran.append((holder, tag))
        return Execution.sent(asyncio.ensure_future(self._answer(tag, gate)))

    async def _answer(self, tag: str, gate: asyncio.Future[None]) -> InferenceResponse:
        try:
            await gate
        finally:
            del self.running[tag]
        return InferenceResponse([Tensor("tag", np.array([tag.encode()], dtype=object))])

    def stream(self, call: Call) -> Any:
        holder = call.holder
        if holder not in self.alive:
            raise WorkerLost("that worker stopped")
        assert holder is not None
        tag = str(call.request.parameters["tag"])
        self.ran.append((holder, tag))
        self.streams[tag] = stream = FakeStream()
        return stream

    def control(self, message: EndSequence) -> None:
        self.ended.append((message.holder, message.sequence_id))

    def finish(self, tag: str) -> None:
        self.running[tag][1].set_result(None)

    def die(self, holder: Holder) -> None:
        self.alive.remove(holder)
        for _, (where, gate) in list(self.running.items()):
            if where == holder:
                gate.set_exception(WorkerLost("The worker process running this request stopped"))
        for listener in self.listeners:
            listener()


class FakeStream(StreamBase):
    """Yields what the test puts in it; None ends it."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()

    async def __anext__(self) -> InferenceResponse:
        tag = await self.queue.get()
        if tag is None:
            self._finish()
            raise StopAsyncIteration
        return InferenceResponse([Tensor("tag", np.array([tag.encode()], dtype=object))])

    def cancel(self) -> None:
        self._finish()


def make(pool: HolderPool, idle_us: int = 60_000_000, **settings: Any) -> Scheduler:
    model = ModelSettings(
        name="acc",
        threads_per_worker=settings.pop("threads_per_worker", 2),
        sequence_batching={"max_sequence_idle_microseconds": idle_us},
        **settings,
    )
    return Scheduler(pool, 1, model)  # type: ignore[arg-type]


def call(
    scheduler: Scheduler,
    tag: str,
    sequence_id: Any,
    trace: RequestTrace | None = None,
    **flags: bool,
) -> asyncio.Task[Any]:
    parameters = {
        "tag": tag,
        "sequence_id": sequence_id,
        **{f"sequence_{k}": v for k, v in flags.items()},
    }
    request = InferenceRequest([Tensor("x", np.array([1]))], parameters=parameters)
    return asyncio.create_task(scheduler.submit(request, RequestContext(trace=trace)))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def done_call(pool: HolderPool, task: asyncio.Task[Any], tag: str) -> Any:
    await settle()
    await done(pool, tag)
    return await task


async def done(pool: HolderPool, *tags: str) -> None:
    for tag in tags:
        pool.finish(tag)
    await settle()


async def test_sequences_are_spread_and_each_stays_on_its_holder() -> None:
    pool = HolderPool()
    scheduler = make(pool)
    starts = [call(scheduler, f"s{n}", n, start=True) for n in range(1, 5)]
    await settle()
    await done(pool, "s1", "s2", "s3", "s4")
    await asyncio.gather(*starts)
    assert pool.ran == [(A, "s1"), (B, "s2"), (A, "s3"), (B, "s4")]
    later = [call(scheduler, f"c{n}", n) for n in (4, 3, 2, 1)]
    await settle()
    await done(pool, "c4", "c3", "c2", "c1")
    await asyncio.gather(*later)
    assert pool.ran[4:] == [(B, "c4"), (A, "c3"), (B, "c2"), (A, "c1")]


async def test_a_sequences_requests_run_one_at_a_time_in_order() -> None:
    pool = HolderPool()
    scheduler = make(pool)
    tasks = [
        call(scheduler, "1a", 1, start=True),
        call(scheduler, "1b", 1),
        call(scheduler, "1c", 1),
    ]
    other = call(scheduler, "2a", 2, start=True)  # on B
    third = call(scheduler, "3a", 3, start=True)  # on A, beside 1a: A has two slots
    await settle()
    assert sorted(pool.running) == ["1a", "2a", "3a"]
    assert scheduler.waiting == 2 and scheduler.in_flight == 3
    await done(pool, "1a")
    assert sorted(pool.running) == ["1b", "2a", "3a"]
    await done(pool, "1b")
    assert sorted(pool.running) == ["1c", "2a", "3a"]
    await done(pool, "1c", "2a", "3a")
    await asyncio.gather(*tasks, other, third)
    assert scheduler.waiting == 0 and scheduler.in_flight == 0


async def test_a_holders_slots_bound_what_runs_there() -> None:
    pool = HolderPool()
    scheduler = make(pool, threads_per_worker=1)
    first = call(scheduler, "1a", 1, start=True)  # A
    second = call(scheduler, "2a", 2, start=True)  # B
    third = call(scheduler, "3a", 3, start=True)  # A, waits for its one slot
    await settle()
    assert sorted(pool.running) == ["1a", "2a"]
    await done(pool, "1a")
    assert sorted(pool.running) == ["2a", "3a"]
    await done(pool, "2a", "3a")
    await asyncio.gather(first, second, third)


async def test_the_runtime_is_told_when_a_sequence_ends_or_expires() -> None:
    pool = HolderPool()
    scheduler = make(pool, idle_us=50_000)
    start = call(scheduler, "1a", 1, start=True)
    await settle()
    await done(pool, "1a")
    await start
    end = call(scheduler, "2a", "two", start=True, end=True)
    await settle()
    assert pool.ended == []  # not while its end request runs
    await done(pool, "2a")
    await end
    assert pool.ended == [(B, "two")]
    await wait_for_async(lambda: len(pool.ended) == 2, "the idle sequence to end", timeout=5)
    assert pool.ended == [(B, "two"), (A, 1)]
    with pytest.raises(InvalidRequest, match=r"sequence 1 expired"):
        await call(scheduler, "1b", 1)


async def test_a_holder_that_dies_fails_its_sequences_clearly() -> None:
    pool = HolderPool()
    scheduler = make(pool, threads_per_worker=1)
    for n in (1, 2):
        task = call(scheduler, f"{n}a", n, start=True)
        await settle()
        await done(pool, f"{n}a")
        await task
    running = call(scheduler, "1b", 1)  # on A
    waiting = call(scheduler, "1c", 1)
    await settle()
    pool.die(A)
    for task in (running, waiting):
        with pytest.raises(WorkerLost, match="Sequence 1 of model 'acc' was lost: the worker"):
            await task
    with pytest.raises(InvalidRequest, match=r"\(sequence 1 was lost: the worker process"):
        await call(scheduler, "1d", 1)
    restarted = call(scheduler, "1e", 1, start=True)  # placed on the live holder
    await settle()
    await done(pool, "1e")
    await restarted
    assert pool.ran[-1] == (B, "1e")
    assert pool.ended == []  # a dead worker's state is gone: nothing to tell
    assert scheduler.waiting == 0 and scheduler.in_flight == 0


async def test_a_cancelled_waiting_request_leaves_its_turn() -> None:
    pool = HolderPool()
    scheduler = make(pool)
    first = call(scheduler, "1a", 1, start=True)
    second = call(scheduler, "1b", 1)
    await settle()
    second.cancel()
    await settle()
    assert scheduler.waiting == 0
    await done(pool, "1a")
    await first
    assert [tag for _, tag in pool.ran] == ["1a"]


async def test_a_waiting_request_cancelled_as_its_holder_dies_is_counted_once() -> None:
    # Its cancellation is handled when its task runs again, after the holder's death
    # failed the turns waiting there: it must not leave the count a second time, or
    # the version never looks idle and its unload waits for ever.
    pool = HolderPool()
    scheduler = make(pool)
    running = call(scheduler, "1a", 1, start=True)
    waiting = call(scheduler, "1b", 1)
    await settle()
    waiting.cancel()
    pool.die(A)  # in the same turn of the loop, before the cancelled task runs
    await settle()
    assert scheduler.waiting == 0
    with pytest.raises(WorkerLost):
        await running
    await asyncio.wait_for(scheduler.close(), 5)


async def test_a_full_queue_refuses_at_once() -> None:
    pool = HolderPool()
    scheduler = make(pool, max_queue_size=1)
    first = call(scheduler, "1a", 1, start=True)
    second = call(scheduler, "1b", 1)
    await settle()
    with pytest.raises(Overloaded, match="queue of model 'acc' is full"):
        await call(scheduler, "1c", 1)
    await done(pool, "1a")
    await settle()
    await done(pool, "1b")
    await asyncio.gather(first, second)


async def test_requests_without_a_sequence_are_refused() -> None:
    scheduler = make(HolderPool())
    with pytest.raises(InvalidRequest, match="non-zero or non-empty correlation ID"):
        await scheduler.submit(InferenceRequest([Tensor("x", np.array([1]))]))
    with pytest.raises(InvalidRequest, match="non-zero or non-empty correlation ID"):
        async for _ in scheduler.stream(InferenceRequest([])):
            pass


async def test_a_stream_holds_its_sequence_until_it_has_finished() -> None:
    pool = HolderPool()
    scheduler = make(pool)
    await done_call(pool, call(scheduler, "1a", 1, start=True), "1a")  # on A
    request = InferenceRequest([], parameters={"tag": "1s", "sequence_id": 1})
    tokens: list[list[InferenceResponse]] = []

    async def read() -> None:
        async for ready in scheduler.stream(request):
            tokens.append(ready)

    reader = asyncio.create_task(read())
    await settle()
    after = call(scheduler, "1b", 1, end=True)
    await settle()
    assert pool.ran[-1] == (A, "1s") and scheduler.waiting == 1  # 1b waits for the stream
    pool.streams["1s"].queue.put_nowait("t1")
    pool.streams["1s"].queue.put_nowait(None)
    await reader
    assert len(tokens) == 1
    await settle()
    assert pool.ran[-1] == (A, "1b")
    await done(pool, "1b")
    await after
    assert pool.ended == [(A, 1)]


async def test_a_stream_cancelled_by_its_reader_frees_its_sequence() -> None:
    pool = HolderPool()
    scheduler = make(pool)
    request = InferenceRequest(
        [], parameters={"tag": "1s", "sequence_id": 1, "sequence_start": True}
    )
    stream = scheduler.stream(request)
    reader = asyncio.create_task(anext(stream))
    await settle()
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    await stream.aclose()
    await settle()
    assert scheduler.in_flight == 0
    await done_call(pool, call(scheduler, "1b", 1), "1b")


async def test_close_waits_for_what_was_admitted() -> None:
    pool = HolderPool()
    scheduler = make(pool)
    running = call(scheduler, "1a", 1, start=True)
    await settle()
    closing = asyncio.create_task(scheduler.close())
    await settle()
    assert not closing.done()
    await done(pool, "1a")
    await asyncio.gather(running, closing)
    assert scheduler.policy.open_sequences == 0  # type: ignore[attr-defined]


async def test_traced_requests_note_their_wait_and_their_run_on_the_holder() -> None:
    pool = HolderPool()
    scheduler = make(pool)
    started, waited = RequestTrace(span=None), RequestTrace(span=None)
    first = call(scheduler, "a", 5, trace=started, start=True)
    await settle()
    second = call(scheduler, "b", 5, trace=waited)  # waits for its sequence's first
    await settle()
    assert pool.ran == [(A, "a")] and waited.batch is None
    await done_call(pool, first, "a")
    await done_call(pool, second, "b")
    for trace in (started, waited):
        batch = trace.batch
        assert batch is not None and (batch.rows, batch.requests, batch.worker) == (1, 1, 0)
        assert 0 < trace.queued_ns <= trace.dispatched_ns <= trace.ended_ns
    assert started.batch is not waited.batch
    assert waited.dispatched_ns > waited.queued_ns  # it waited for "a"
