"""Requests in flight on a worker that dies are retried once, unless one ran there
alone (the suspect: answered 503, not retried); calls past their inference_timeout
are answered 504 and their worker killed. On fake workers (see
test_workers_pool.py): no process starts, no back-off is slept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from inferd.errors import InferenceTimeout, ModelError, ModelNotReady, WorkerLost
from inferd.observability.stats import ModelStatsTable
from inferd.settings import ServerSettings
from inferd.workers.base import Call, Execution
from inferd.workers.pool import ProcessPool, RestartPolicy
from inferd.workers.process import WorkerProcess
from inferd.workers.retry import SentCall, failure_to_answer
from tests.support.polling import wait_for_async

from .test_workers_pool import (
    REQUEST,
    Pools,
    fakes,
    model,
    restarted,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pools() -> AsyncIterator[Pools]:
    made = Pools()
    yield made
    await made.close()


def predict(pool: ProcessPool, count: int, instance_id: int = 1) -> list[Execution]:
    return [pool.predict(Call(instance_id, REQUEST)) for _ in range(count)]


async def test_requests_whose_worker_dies_are_answered_by_another_holder(pools: Pools) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a", threads_per_worker=2))
    first, second, third = predict(pool, 3)  # w0, w1, w0: the least loaded first
    assert (len(w0.requests), len(w1.requests)) == (2, 1)
    w1.answer()
    await asyncio.sleep(0)  # w1's slots are free again

    w0.die()  # with two requests running: neither is the suspect
    await wait_for_async(lambda: len(w1.requests) == 3, "len(w1.requests) == 3", timeout=5)
    w1.answer()
    w1.answer()
    for execution in (first, second, third):
        assert (await execution.result()).outputs[0].name == "y"
    assert w1.outstanding == 0


async def test_the_only_request_running_when_its_worker_dies_is_the_suspect_not_retried(
    pools: Pools,
) -> None:
    """Its predict may be what killed the worker (os._exit, a segfault): sent again it
    would kill the other worker too, and the requests running there."""
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a"))
    (suspect,) = predict(pool, 1)
    w0.die()
    message = (
        r"^The worker process running this request \(worker 0 \(pid None\)\) died while "
        r"running it, and it was the only request running there: it may be what killed "
        r"the worker, so it was not retried \(another worker would die the same way\)\. "
        r"The worker is being restarted\.$"
    )
    with pytest.raises(WorkerLost, match=message):
        await suspect.result()
    await wait_for_async(restarted(w0, 1), "restarted(w0, 1)", timeout=5)
    assert (len(w0.requests), len(w1.requests)) == (1, 0), "sent nowhere again"


async def test_a_request_sent_to_a_worker_that_died_before_reading_it_runs_elsewhere(
    pools: Pools,
) -> None:
    """Sent after the worker died, before the pool noticed: it never ran there, so it
    is no suspect, and its move does not count as its one retry."""
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a"))
    (unread,) = predict(pool, 1)
    w0.die(unread=1)
    await wait_for_async(lambda: len(w1.requests) == 1, "sent to the other worker", timeout=5)
    w1.answer()
    assert (await unread.result()).outputs[0].name == "y"


async def test_the_only_request_read_is_the_suspect_and_one_unread_alongside_runs_elsewhere(
    pools: Pools,
) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a", threads_per_worker=2))
    suspect, busy, unread = predict(pool, 3)  # w0, w1, w0; w0 read only the first
    w0.die(unread=1)
    with pytest.raises(WorkerLost, match="it was the only request running there"):
        await suspect.result()
    await wait_for_async(lambda: len(w1.requests) == 2, "the unread one on w1", timeout=5)
    w1.answer()
    w1.answer()
    for execution in (busy, unread):
        assert (await execution.result()).outputs[0].name == "y"


async def test_a_request_of_another_model_running_alongside_makes_neither_the_suspect(
    pools: Pools,
) -> None:
    pool = await pools.start(1)
    (worker,) = fakes(pool)
    await pool.load(1, model("a"))
    await pool.load(2, model("b"))
    both = predict(pool, 1, 1) + predict(pool, 1, 2)
    worker.die()
    await wait_for_async(restarted(worker, 1), "restarted(worker, 1)", timeout=5)
    await wait_for_async(lambda: len(worker.requests) == 4, "the two retries", timeout=5)
    worker.answer()
    worker.answer()
    for execution in both:
        assert (await execution.result()).outputs[0].name == "y"


async def test_a_retry_waits_for_a_free_slot_and_goes_before_new_requests(pools: Pools) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a", threads_per_worker=2))
    lost, busy, lost_too, busy_too = predict(pool, 4)  # w0, w1, w0, w1
    w0.die()
    await asyncio.sleep(0)
    assert len(w1.requests) == 2, "w1's slots are taken: the retries wait"

    w1.answer()  # a slot frees: a retry takes it before anything else can
    await busy.result()
    assert len(w1.requests) == 3 and w1.free_slots(1) == 0
    w1.answer()
    w1.answer()
    await wait_for_async(lambda: len(w1.requests) == 4, "the second retry", timeout=5)
    w1.answer()
    for execution in (lost, busy_too, lost_too):
        assert (await execution.result()).outputs[0].name == "y"


async def test_a_model_in_one_worker_is_retried_on_the_restarted_worker(pools: Pools) -> None:
    pool = await pools.start(2)
    w0, _ = fakes(pool)
    await pool.load(1, model("a", workers=1, threads_per_worker=2))
    lost = predict(pool, 2)
    pools.sleep.gate.clear()  # the restart waits: the retries with it
    w0.die()
    await wait_for_async(
        lambda: len(pools.sleep.delays) == 1, "len(pools.sleep.delays) == 1", timeout=5
    )
    assert not any(execution.as_future().done() for execution in lost)

    pools.sleep.gate.set()
    await wait_for_async(lambda: len(w0.requests) == 4, "len(w0.requests) == 4", timeout=5)
    w0.answer()
    w0.answer()
    for execution in lost:
        assert (await execution.result()).outputs[0].name == "y"
    assert w0.restarts == 1


async def test_a_request_is_retried_once_then_fails_with_both_reasons(pools: Pools) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a", threads_per_worker=2))
    lost, answered, lost_too = predict(pool, 3)  # w0, w1, w0
    w1.answer()
    await answered.result()
    w0.die()
    await wait_for_async(lambda: len(w1.requests) == 3, "len(w1.requests) == 3", timeout=5)
    w1.die()  # with both retries running: neither is the suspect
    message = (
        r"\(worker 1 \(pid None\)\) stopped before answering; it is being restarted\. Retry "
        r"the request\. It had already been sent again once, after worker 0 \(pid None\) "
        r"stopped while running it; a request is retried only once\.$"
    )
    for execution in (lost, lost_too):
        with pytest.raises(WorkerLost, match=message):
            await execution.result()


async def test_a_model_that_opts_out_is_not_retried(pools: Pools) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a", retry_on_worker_failure=False, inference_timeout=60))
    lost = pool.predict(Call(1, REQUEST))
    w0.die()
    with pytest.raises(WorkerLost, match=r"\(worker 0 \(pid None\)\) stopped before answering"):
        await lost.result()
    assert w1.requests == []


async def test_a_retry_that_finds_no_slot_in_time_fails_saying_so(pools: Pools) -> None:
    pool = await pools.start(1, RestartPolicy(retry_wait=0.05))
    (worker,) = fakes(pool)
    await pool.load(1, model("a", threads_per_worker=2))
    lost = predict(pool, 2)
    pools.sleep.gate.clear()  # the worker stays down
    worker.die()
    message = (
        r"^worker 0 \(pid None\) stopped while running this request, and no worker process "
        r"holding model 'a' was free to run it again within 0\.05s; retry the request$"
    )
    for execution in lost:
        with pytest.raises(WorkerLost, match=message):
            await execution.result()
    pools.sleep.gate.set()
    await wait_for_async(restarted(worker, 1), "restarted(worker, 1)", timeout=5)
    assert worker.requests[2:] == [], "an expired retry is not sent later"


async def test_retries_waiting_when_the_model_goes_fail_with_why(pools: Pools) -> None:
    pool = await pools.start(1)
    (worker,) = fakes(pool)
    await pool.load(1, model("a"))
    await pool.load(2, model("b"))
    unloaded, closed = pool.predict(Call(1, REQUEST)), pool.predict(Call(2, REQUEST))
    pools.sleep.gate.clear()
    worker.die()
    await asyncio.sleep(0)
    await pool.unload(1)
    with pytest.raises(ModelNotReady, match="no longer loaded"):
        await unloaded.result()
    await pool.close()
    with pytest.raises(WorkerLost, match=r"^The server is shutting down$"):
        await closed.result()


async def test_a_call_past_its_inference_timeout_is_answered_504_and_its_worker_killed(
    pools: Pools,
) -> None:
    stats = ModelStatsTable()
    pool = await pools.start(2, stats=stats)
    w0, w1 = fakes(pool)
    settings = model("slow", threads_per_worker=2, inference_timeout=0.05)
    await pool.load(1, settings)
    await pool.load(2, model("other", workers=1))
    stuck = pool.predict(Call(1, REQUEST))
    bystander = pool.predict(Call(2, REQUEST))  # on w0 too: the least loaded
    assert (len(w0.requests), len(w1.requests)) == (2, 0)

    message = (
        r"^Model 'slow' ran past its inference_timeout of 0\.05s; the worker process "
        r"running it \(worker 0 \(pid None\)\) was killed and is being restarted$"
    )
    with pytest.raises(InferenceTimeout, match=message):
        await stuck.result()
    assert stats.of("slow", None).timeouts == 1
    await wait_for_async(
        lambda: len(w0.requests) == 3, "len(w0.requests) == 3", timeout=5
    )  # the bystander, retried on w0 restarted
    assert w0.restarts == 1 and w0.quick_deaths == 0, "no back-off for a kill on purpose"
    w0.answer()
    assert (await bystander.result()).outputs[0].name == "y"
    assert len(w1.requests) == 0, "the request that ran too long is not retried"


async def test_only_a_lost_worker_leads_to_one_retry_unless_the_model_or_shutdown_says_no() -> None:
    call = SentCall(Call(1, REQUEST), model("a"), asyncio.get_running_loop().create_future())
    lost = WorkerLost("worker 0 died.")
    own_fault = ModelError("the model failed")
    assert failure_to_answer(call, own_fault, closing=False) is own_fault
    assert failure_to_answer(call, lost, closing=False) is None
    call.worker = WorkerProcess(0, ServerSettings(parallel_workers=1), lambda _: None)
    call.worker.running_at_death = 2  # it ran alongside another request
    assert failure_to_answer(call, lost, closing=False) is None
    call.worker.running_at_death = 1  # it ran alone there: the suspect
    suspect = failure_to_answer(call, lost, closing=False)
    assert isinstance(suspect, WorkerLost) and "it was not retried" in suspect.message
    call.worker = None
    assert failure_to_answer(call, lost, closing=True) is lost
    call.settings = model("a", retry_on_worker_failure=False)
    assert failure_to_answer(call, lost, closing=False) is lost
    call.settings, call.lost_on = model("a"), "worker 1 (pid 7)"
    again = failure_to_answer(call, lost, closing=False)
    assert isinstance(again, WorkerLost) and again.message == (
        "worker 0 died. It had already been sent again once, after worker 1 (pid 7) stopped "
        "while running it; a request is retried only once."
    )
