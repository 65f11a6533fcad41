"""What the scheduler records for traced requests (observability/trace_record.py),
on a pool the test drives."""

from __future__ import annotations

import asyncio
import time

import pytest

from inferd.context import RequestContext
from inferd.observability.trace_record import BatchRun, RequestTrace
from inferd.types import InferenceRequest
from inferd.workers.base import Call, Execution

from .test_scheduler_batching import BatchPool, request, scheduler, settle

pytestmark = pytest.mark.anyio


class TimedPool(BatchPool):
    """A BatchPool that notes, as the real pools do, when a traced batch's predict ran."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[BatchRun | None] = []

    def predict(self, call: Call) -> Execution:
        self.runs.append(call.run)
        return Execution.inline(self._timed(call.request, call.run))

    async def _timed(self, request: InferenceRequest, run: BatchRun | None) -> object:
        started = time.time_ns()
        response = await self._run(request)
        if run is not None:
            run.predicted(7, started, time.time_ns())
        return response


def traced() -> RequestContext:
    return RequestContext(trace=RequestTrace(span=None))


async def test_a_lone_traced_request_records_its_own_batch_and_no_wait() -> None:
    pool = TimedPool()
    context = traced()
    task = asyncio.create_task(scheduler(pool, max_batch_size=8).submit(request(1, 2), context))
    await settle()
    pool.go()
    await task
    trace = context.trace
    assert trace is not None and trace.batch is not None
    assert trace.queued_ns == trace.dispatched_ns <= trace.ended_ns
    assert (trace.batch.rows, trace.batch.requests, trace.batch.worker) == (2, 1, 7)
    assert 0 < trace.batch.predict_started_ns <= trace.batch.predict_ended_ns
    assert pool.runs == [trace.batch]


async def test_a_batch_is_shared_by_its_traced_requests_only() -> None:
    pool = TimedPool()
    batched = scheduler(pool, max_batch_size=8, max_batch_time=5.0)
    first = asyncio.create_task(batched.submit(request(1)))  # untraced: no record asked
    await settle()
    contexts = [traced(), RequestContext(), traced()]
    waiting = [
        asyncio.create_task(batched.submit(request(*values), context))
        for values, context in zip(([2], [3, 4], [5]), contexts, strict=True)
    ]
    await settle()
    pool.go()
    await first
    await settle()
    pool.go()
    await asyncio.gather(*waiting)
    assert pool.runs[0] is None
    shared = pool.runs[1]
    assert shared is not None and (shared.rows, shared.requests) == (4, 3)
    first_trace, untraced, last_trace = (context.trace for context in contexts)
    assert untraced is None and first_trace is not None and last_trace is not None
    assert first_trace.batch is shared and last_trace.batch is shared
    for trace in (first_trace, last_trace):
        assert trace.queued_ns < trace.dispatched_ns <= trace.ended_ns


async def test_untraced_requests_record_nothing() -> None:
    pool = TimedPool()
    task = asyncio.create_task(scheduler(pool).submit(request(1)))
    await settle()
    pool.go()
    await task
    assert pool.runs == [None]
