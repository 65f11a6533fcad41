"""The scheduler with adaptive batching and queue limits, on a pool the test drives."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from inferd.dispatch.scheduler import Scheduler
from inferd.errors import DeadlineExceeded, ModelError, Overloaded
from inferd.observability.stats import ModelStats
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, ModelMetadata, Tensor
from inferd.workers.base import Call, Execution

pytestmark = pytest.mark.anyio


class BatchPool:
    """Capacity 1; each predict waits for the test's go, then doubles x (or misbehaves)."""

    def __init__(self) -> None:
        self.batches: list[list[float]] = []
        self.gates: list[asyncio.Event] = []
        self.drop_a_row = False

    def capacity(self, instance_id: int) -> int:
        return 1

    def restarting(self, instance_id: int) -> bool:
        return False

    def watch(self, instance_id: int, on_capacity_change: Callable[[], None]) -> None:
        """Capacity never changes here."""

    def predict(self, call: Call) -> Execution:
        return Execution.inline(self._run(call.request))

    async def _run(self, request: InferenceRequest) -> InferenceResponse:
        x = request.input("x").data
        self.batches.append(x[:, 0].tolist())
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        y = x[:-1] if self.drop_a_row else x
        return InferenceResponse([Tensor("y", y * 2)])

    def go(self) -> None:
        for gate in self.gates:
            gate.set()

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def load(self, instance_id: int, settings: ModelSettings) -> ModelMetadata: ...
    async def unload(self, instance_id: int) -> None: ...
    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None: ...


def request(*values: float, **parameters: object) -> InferenceRequest:
    data = np.array(values, dtype=np.float32).reshape(-1, 1)
    return InferenceRequest([Tensor("x", data)], id=f"r{values[0]}", parameters=dict(parameters))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def scheduler(pool: BatchPool, stats: ModelStats | None = None, **settings: object) -> Scheduler:
    return Scheduler(pool, 1, ModelSettings(name="m", **settings), stats)  # type: ignore[arg-type]


async def test_waiting_requests_go_out_as_one_batch_and_get_their_own_rows() -> None:
    pool = BatchPool()
    stats = ModelStats("m", None)
    batched = scheduler(pool, stats, max_batch_size=8, max_batch_time=5.0)
    first = asyncio.create_task(batched.submit(request(1)))
    await settle()
    assert pool.batches == [[1]], "a lone request on an idle server does not wait"
    rest = [asyncio.create_task(batched.submit(request(*r))) for r in ([2], [3, 4, 5], [6])]
    await settle()
    assert batched.waiting == 3
    pool.go()
    await first
    await settle()
    assert pool.batches[1] == [2, 3, 4, 5, 6]
    assert stats.batch_counts == {1: 1, 5: 1} and stats.execution_count == 2
    pool.go()
    answers = await asyncio.gather(*rest)
    assert [a.output("y").data[:, 0].tolist() for a in answers] == [[4], [6, 8, 10], [12]]
    assert [a.id for a in answers] == ["r2", "r3", "r6"]


async def test_a_model_that_loses_rows_fails_each_request_of_the_batch() -> None:
    pool = BatchPool()
    batched = scheduler(pool, max_batch_size=8)
    first = asyncio.create_task(batched.submit(request(1)))
    rest = [asyncio.create_task(batched.submit(request(v))) for v in (2, 3)]
    await settle()
    pool.drop_a_row = True
    pool.go()
    await settle()
    pool.go()
    for task in rest:
        with pytest.raises(ModelError, match="batch of 2 rows with 1 rows"):
            await task
    await first  # a lone request is not a batch: its answer passes through unchecked


async def test_a_full_queue_refuses_at_once_and_a_cancelled_waiter_leaves_it() -> None:
    pool = BatchPool()
    bounded = scheduler(pool, max_queue_size=1)
    running = asyncio.create_task(bounded.submit(request(1)))
    waiting = asyncio.create_task(bounded.submit(request(2)))
    await settle()
    with pytest.raises(Overloaded, match="queue of model 'm' is full"):
        await bounded.submit(request(3))
    waiting.cancel()
    await settle()
    assert bounded.waiting == 0
    pool.go()
    await running
    assert pool.batches == [[1]], "the cancelled request never ran"


async def test_a_request_past_its_deadline_leaves_the_queue_unrun() -> None:
    pool = BatchPool()
    timed = scheduler(pool, timeout=30.0)
    running = asyncio.create_task(timed.submit(request(1)))
    await settle()
    with pytest.raises(DeadlineExceeded, match="past its timeout"):
        await asyncio.wait_for(timed.submit(request(2, timeout=1000)), 5)  # 1 ms
    assert timed.waiting == 0
    pool.go()
    await running
    assert pool.batches == [[1]]
