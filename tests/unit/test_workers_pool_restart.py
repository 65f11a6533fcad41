"""The books a worker's restart leaves (issue 25): a worker killed with requests in flight
comes back counting only what runs on it, the requests lost with it are retried into
free slots only, and a scheduler over the pool keeps its queue bound through it all.
On the fake workers of test_workers_pool: no process starts, no back-off is slept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from inferd.dispatch.scheduler import Scheduler
from inferd.errors import Overloaded
from inferd.settings import ServerSettings
from inferd.workers import messages
from inferd.workers.base import Call
from inferd.workers.pool import ProcessPool
from tests.support.polling import wait_for_async

from .test_workers_pool import REQUEST, FakeWorker, Pools, model, restarted

pytestmark = pytest.mark.anyio

BOUND = 3  # the model's max_queue_size


class CountingWorker(FakeWorker):
    """A fake worker that notes the most requests it ever held unanswered at once."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.most_running = 0

    def received(
        self, kind: type[messages.Command], instance_id: int, body: Any, future: asyncio.Future[Any]
    ) -> None:
        super().received(kind, instance_id, body, future)
        if kind is messages.Predict:
            self.most_running = max(self.most_running, self.running)

    @property
    def running(self) -> int:
        """Requests sent to its current process and not answered yet."""
        return sum(not future.done() for future in self.requests)

    def answer_all(self) -> None:
        for _ in range(self.running):
            self.answer()


class CountingPools(Pools):
    """Pools of counting workers."""

    async def start(self, workers: int, *_: Any, **__: Any) -> ProcessPool:
        settings = ServerSettings(parallel_workers=workers)
        pool = ProcessPool(settings, make_worker=CountingWorker, sleep=self.sleep)
        self.opened.append(pool)
        await pool.start()
        return pool


@pytest.fixture
async def pools() -> AsyncIterator[Pools]:
    made = CountingPools()
    yield made
    await made.close()


def counting(pool: ProcessPool) -> list[CountingWorker]:
    return [worker for worker in pool.workers if isinstance(worker, CountingWorker)]


async def test_a_worker_killed_with_requests_in_flight_comes_back_counting_only_its_own(
    pools: Pools,
) -> None:
    pool = await pools.start(2)
    w0, w1 = counting(pool)
    await pool.load(1, model("a", threads_per_worker=2))
    sent = [pool.predict(Call(1, REQUEST)) for _ in range(4)]
    assert (w0.running, w1.running) == (2, 2)

    pools.sleep.gate.clear()  # the restart waits, and the two lost requests with it
    w0.die()
    await wait_for_async(
        lambda: len(pools.sleep.delays) == 1, "len(pools.sleep.delays) == 1", timeout=5
    )
    assert pool.capacity(1) == 2 and not w0.serves(1)
    assert w0.outstanding == 0, "the dead process's requests are not counted"
    assert w1.running == 2, "the lost requests wait: the other worker has no free slot"

    pools.sleep.gate.set()
    await wait_for_async(restarted(w0, 1), "restarted(w0, 1)", timeout=5)
    assert pool.capacity(1) == 4
    assert w0.running == 2 and w0.outstanding == 2 and w0.free_slots(1) == 0, (
        "the two retries hold the restarted worker's two slots, no more"
    )
    for worker in (w0, w1):
        worker.answer_all()
    assert all([(await execution.result()).outputs for execution in sent])
    assert (w0.free_slots(1), w1.free_slots(1), w0.outstanding, w1.outstanding) == (2, 2, 0, 0)
    assert w0.most_running <= 2 and w1.most_running <= 2


async def test_a_reply_read_as_its_worker_dies_counts_once_and_is_not_retried(
    pools: Pools,
) -> None:
    pool = await pools.start(1)
    (worker,) = counting(pool)
    await pool.load(1, model("a", threads_per_worker=2))
    answered, lost = pool.predict(Call(1, REQUEST)), pool.predict(Call(1, REQUEST))
    worker.answer()  # its reply is read, then the socket closes, in the same turn
    worker.die()
    assert (await answered.result()).outputs[0].name == "y"
    await wait_for_async(
        lambda: restarted(worker, 1)() and worker.running == 1,
        "restarted(worker, 1)() and worker.running == 1",
        timeout=5,
    )
    assert worker.outstanding == 1 and worker.free_slots(1) == 1, "the retry alone"
    worker.answer()
    assert (await lost.result()).outputs[0].name == "y"
    assert worker.commands.count((messages.Predict, 1)) == 3, "two sent, one of them again"
    assert worker.free_slots(1) == 2 and worker.outstanding == 0


async def test_through_a_restart_the_scheduler_keeps_its_bound_and_the_workers_their_slots(
    pools: Pools,
) -> None:
    pool = await pools.start(2)
    w0, w1 = counting(pool)
    settings = model("a", max_queue_size=BOUND, threads_per_worker=2)
    await pool.load(1, settings)
    scheduler = Scheduler(pool, 1, settings)
    admitted = [asyncio.ensure_future(scheduler.submit(REQUEST)) for _ in range(4 + BOUND)]
    await wait_for_async(
        lambda: scheduler.waiting == BOUND, "scheduler.waiting == BOUND", timeout=5
    )
    with pytest.raises(Overloaded):
        await scheduler.submit(REQUEST)

    w0.die()  # with its two requests: retried once it is back, ahead of the queue
    await wait_for_async(
        lambda: restarted(w0, 1)() and w0.running == 2,
        "restarted(w0, 1)() and w0.running == 2",
        timeout=5,
    )
    assert (scheduler.in_flight, scheduler.waiting, pool.capacity(1)) == (4, BOUND, 4)
    with pytest.raises(Overloaded):
        await scheduler.submit(REQUEST)

    while not all(task.done() for task in admitted):
        for worker in (w0, w1):
            worker.answer_all()
        await asyncio.sleep(0.001)
    assert all([task.result().outputs for task in admitted])
    assert w0.most_running == w1.most_running == 2, "never more than a worker's two slots"
    assert (scheduler.in_flight, scheduler.waiting) == (0, 0)
    assert (w0.free_slots(1), w1.free_slots(1), w0.outstanding, w1.outstanding) == (2, 2, 0, 0)
