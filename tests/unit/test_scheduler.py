"""The scheduler: within the pool's capacity, FIFO beyond it, no slot ever lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from inferd.dispatch.scheduler import Scheduler
from inferd.errors import WorkerLost
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, ModelMetadata, Tensor
from inferd.workers.base import Call, Execution

pytestmark = pytest.mark.anyio


class GatedPool:
    """A pool whose predicts wait until the test releases them, one gate per request."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self.restarts = False  # whether a capacity of 0 is a restart (worth a wait)
        self.listener: Callable[[], None] | None = None
        self.running: list[tuple[int, asyncio.Event]] = []
        self.started: list[int] = []
        self.most_at_once = 0

    def capacity(self, instance_id: int) -> int:
        return self._capacity

    def restarting(self, instance_id: int) -> bool:
        return self.restarts

    def set_capacity(self, capacity: int) -> None:
        self._capacity = capacity
        assert self.listener is not None
        self.listener()

    def watch(self, instance_id: int, on_capacity_change: Callable[[], None]) -> None:
        self.listener = on_capacity_change

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        """Not used here."""

    def predict(self, call: Call) -> Execution:
        if self._capacity == 0:
            raise WorkerLost("no worker")
        return Execution.inline(self._run(int(call.request.inputs[0].data[0])))

    async def _run(self, number: int) -> InferenceResponse:
        gate = asyncio.Event()
        self.running.append((number, gate))
        self.started.append(number)
        self.most_at_once = max(self.most_at_once, len(self.running))
        try:
            await gate.wait()
        finally:
            self.running.remove((number, gate))
        return InferenceResponse([Tensor("n", np.array([number]))])

    def finish(self, number: int) -> None:
        (gate,) = [gate for running, gate in self.running if running == number]
        gate.set()

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def load(self, instance_id: int, settings: ModelSettings) -> ModelMetadata: ...
    async def unload(self, instance_id: int) -> None: ...


def request(number: int) -> InferenceRequest:
    return InferenceRequest([Tensor("n", np.array([number]))])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def submit_all(scheduler: Scheduler, numbers: range) -> list[asyncio.Task[InferenceResponse]]:
    tasks = [asyncio.create_task(scheduler.submit(request(n))) for n in numbers]
    await settle()
    return tasks


async def test_requests_beyond_capacity_wait_and_run_in_arrival_order() -> None:
    pool = GatedPool(capacity=2)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(5))
    assert pool.started == [0, 1] and scheduler.waiting == 3
    for number in range(5):
        pool.finish(number)
        await settle()
    assert pool.started == [0, 1, 2, 3, 4] and pool.most_at_once == 2
    assert [int(t.result().outputs[0].data[0]) for t in tasks] == [0, 1, 2, 3, 4]
    assert (scheduler.in_flight, scheduler.waiting) == (0, 0)


async def test_a_free_slot_takes_no_detour() -> None:
    pool = GatedPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    task = asyncio.create_task(scheduler.submit(request(7)))
    await asyncio.sleep(0)  # one step: straight into the pool's predict
    assert pool.started == [7] and scheduler.in_flight == 1 and scheduler.waiting == 0
    pool.finish(7)
    await task


async def test_more_capacity_lets_waiting_requests_start_at_once() -> None:
    pool = GatedPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(4))
    assert pool.started == [0]
    pool.set_capacity(3)
    await settle()
    assert pool.started == [0, 1, 2] and scheduler.waiting == 1
    for number in range(4):
        pool.finish(number)
        await settle()
    await asyncio.gather(*tasks)


async def test_less_capacity_is_respected_as_requests_finish() -> None:
    pool = GatedPool(capacity=2)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(4))
    pool._capacity = 1  # a worker died: its slot is gone
    pool.finish(0)
    await settle()
    assert pool.started == [0, 1], "one still running, and the capacity is now 1"
    pool.finish(1)
    await settle()
    assert pool.started == [0, 1, 2]
    for number in (2, 3):
        pool.finish(number)
        await settle()
    await asyncio.gather(*tasks)


async def test_with_no_capacity_left_waiting_requests_get_the_pools_error() -> None:
    pool = GatedPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(3))
    pool.set_capacity(0)
    await settle()
    for task in tasks[1:]:
        with pytest.raises(WorkerLost, match="no worker"):
            await task
    with pytest.raises(WorkerLost):
        await scheduler.submit(request(9))  # refused at once, not parked
    pool.finish(0)
    await tasks[0]
    assert (scheduler.in_flight, scheduler.waiting) == (0, 0)


async def test_with_no_capacity_while_restarting_requests_wait_for_the_restart() -> None:
    # The last worker died and is restarted: its requests wait as for a busy pool,
    # not 503 by the thousand (issue #43).
    pool = GatedPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(2))
    pool.restarts = True
    pool.set_capacity(0)
    later = asyncio.create_task(scheduler.submit(request(9)))  # parked, not refused
    await settle()
    assert not any(task.done() for task in [*tasks[1:], later])
    assert scheduler.waiting == 2
    pool.set_capacity(1)  # back
    pool.finish(0)
    for number in (1, 9):
        await settle()
        pool.finish(number)
    await asyncio.gather(*tasks, later)


async def test_a_restart_that_takes_too_long_lets_the_waiters_get_the_pools_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("inferd.dispatch.queued.RESTART_WAIT_SECONDS", 0.05)
    pool = GatedPool(capacity=0)
    pool.restarts = True
    scheduler = Scheduler(pool, 1)
    waiting = asyncio.create_task(scheduler.submit(request(1)))
    await settle()
    assert not waiting.done()
    with pytest.raises(WorkerLost, match="no worker"):
        await asyncio.wait_for(waiting, 5)
    with pytest.raises(WorkerLost):
        await scheduler.submit(request(2))  # still down: refused at once now


async def test_a_cancelled_waiter_gives_its_place_back() -> None:
    pool = GatedPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(3))
    tasks[1].cancel()
    await settle()
    assert scheduler.waiting == 1
    pool.finish(0)
    await settle()
    assert pool.started == [0, 2]
    pool.finish(2)
    await asyncio.gather(tasks[0], tasks[2])
    assert (scheduler.in_flight, scheduler.waiting) == (0, 0)


async def test_a_waiter_cancelled_as_its_slot_arrives_releases_it() -> None:
    pool = GatedPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(3))
    pool.finish(0)
    while scheduler.waiting == 2:  # until 0 has finished and handed its slot to 1 ...
        await asyncio.sleep(0)
    assert pool.started == [0] and scheduler.in_flight == 1
    tasks[1].cancel()  # ... which is cancelled before it could use it
    await settle()
    assert pool.started == [0, 2], "the slot went on to the next waiter"
    pool.finish(2)
    await asyncio.gather(tasks[0], tasks[2])
    assert scheduler.in_flight == 0


async def test_close_waits_for_running_and_waiting_requests() -> None:
    pool = GatedPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(2))
    closing = asyncio.create_task(scheduler.close())
    await settle()
    assert not closing.done()
    pool.finish(0)
    await settle()
    assert not closing.done(), "the waiting request still runs"
    pool.finish(1)
    await asyncio.wait_for(closing, 1)
    assert all(task.done() and not task.exception() for task in tasks)


class StartingPool(GatedPool):
    """Like the process pool: predict sends at once and returns the call's future."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.calls: dict[int, asyncio.Future[InferenceResponse]] = {}

    def predict(self, call: Call) -> Execution:
        number = int(call.request.inputs[0].data[0])
        self.started.append(number)
        self.calls[number] = future = asyncio.get_running_loop().create_future()
        return Execution.sent(future)

    def finish(self, number: int) -> None:
        self.calls[number].set_result(InferenceResponse([Tensor("n", np.array([number]))]))


async def test_a_finished_request_starts_the_next_one_before_it_answers() -> None:
    pool = StartingPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    started_when_0_returned: list[int] = []

    async def first() -> None:
        await scheduler.submit(request(0))
        started_when_0_returned.extend(pool.started)

    tasks = [asyncio.create_task(first()), *await submit_all(scheduler, range(1, 3))]
    await settle()
    pool.finish(0)
    await tasks[0]
    assert started_when_0_returned == [0, 1], "1 was sent before 0 went on to answer"
    pool.finish(1)
    await settle()
    pool.finish(2)
    await asyncio.gather(*tasks)


async def test_a_cancelled_waiter_whose_request_started_frees_its_slot_when_it_ends() -> None:
    pool = StartingPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    tasks = await submit_all(scheduler, range(3))
    pool.finish(0)
    while scheduler.waiting == 2:  # 1's request has been sent ...
        await asyncio.sleep(0)
    tasks[1].cancel()  # ... and then its client gives up
    await settle()
    assert pool.started == [0, 1], "2 waits: 1 still runs in the worker"
    pool.calls[1].set_exception(WorkerLost("gone"))  # nobody to tell, no warning either
    await settle()
    assert pool.started == [0, 1, 2]
    pool.finish(2)
    await asyncio.gather(tasks[0], tasks[2])
    assert (scheduler.in_flight, scheduler.waiting) == (0, 0)


async def test_a_client_leaving_a_request_sent_to_a_worker_keeps_its_slot_until_it_ends() -> None:
    """A worker does not stop when the client leaves: the slot stays taken, or work
    would pile up in the worker beyond capacity (and beyond the queue's bound)."""
    pool = StartingPool(capacity=1)
    scheduler = Scheduler(pool, 1)
    leaving = asyncio.create_task(scheduler.submit(request(0)))  # straight to the worker
    await settle()
    leaving.cancel()
    await settle()
    waiting = await submit_all(scheduler, range(1, 2))
    assert pool.started == [0] and scheduler.waiting == 1, "0 still runs in the worker"
    pool.finish(0)  # its answer arrives, for nobody
    await settle()
    assert pool.started == [0, 1]
    queued_then_leaving = await submit_all(scheduler, range(2, 3))
    pool.finish(1)
    await settle()
    assert pool.started == [0, 1, 2]
    queued_then_leaving[0].cancel()  # 2 was queued, started, and now its client leaves
    await submit_all(scheduler, range(3, 4))
    assert pool.started == [0, 1, 2] and scheduler.waiting == 1
    pool.calls[2].set_exception(WorkerLost("gone"))  # nobody to tell, no warning either
    await settle()
    assert pool.started == [0, 1, 2, 3]
    pool.finish(3)
    await asyncio.gather(*waiting)
    await settle()
    assert (scheduler.in_flight, scheduler.waiting) == (0, 0)
