"""The process pool's side of sequences, on fake workers: requests go to the holder
named, never retried elsewhere; a restarted worker is a new holder."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from inferd.dispatch.sequences import EndSequence
from inferd.errors import WorkerLost
from inferd.types import InferenceRequest
from inferd.workers import messages
from inferd.workers.base import Call, Execution
from tests.support.polling import wait_for_async

from .test_workers_pool import REQUEST, Pools, fakes, model, pools, restarted

pytestmark = pytest.mark.anyio

__all__ = ["pools"]  # the fixture, imported for these tests


@pytest.mark.parametrize("timed", [{}, {"inference_timeout": 30}], ids=["plain", "timed"])
async def test_a_request_goes_to_its_holder_and_is_never_retried_elsewhere(
    pools: Pools, timed: dict[str, Any]
) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("acc", threads_per_worker=2, sequence_batching={}, **timed))
    assert pool.holders(1) == [(0, 1), (1, 1)]
    sent = pool.predict(Call(1, REQUEST, (1, 1)))
    assert (len(w0.requests), len(w1.requests)) == (0, 1)
    w1.die()
    with pytest.raises(WorkerLost):
        await sent.result()
    assert len(w0.requests) == 0, "its state was in the worker that died"
    await wait_for_async(restarted(w1, 1), "restarted(w1, 1)", timeout=5)
    assert pool.holders(1) == [(0, 1), (1, 2)], "the restarted worker is a new holder"
    with pytest.raises(WorkerLost, match="worker 1 stopped since the sequence started"):
        pool.predict(Call(1, REQUEST, (1, 1)))
    with pytest.raises(WorkerLost, match="worker 1 stopped since the sequence started"):
        pool.stream(Call(1, REQUEST, (1, 1)))


async def test_sequence_end_reaches_only_the_live_holder(pools: Pools) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("acc", sequence_batching={}))
    pool.control(EndSequence(1, (0, 1), "chat-7"))
    pool.control(EndSequence(1, (1, 5), "chat-8"))  # a holder that is not alive: nothing to tell
    assert w0.commands[-1][0] == messages.ApplyControl
    assert w0.controls == [EndSequence(1, (0, 1), "chat-7")]
    assert w1.controls == []
    assert pool.holders(2) == []


async def test_without_sequence_batching_a_sequence_id_picks_one_worker(pools: Pools) -> None:
    """Whole-number ids go round the workers, strings by a hash; a request without
    one goes to the least loaded worker; the sequence of a worker that is down goes
    to a live one, the others stay where they are."""
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("stateful", threads_per_worker=4, retry_on_worker_failure=False))
    sent: list[Execution] = []

    def sent_to(parameters: dict[str, Any]) -> int:
        before = len(w0.requests)
        sent.append(pool.predict(Call(1, InferenceRequest(REQUEST.inputs, parameters=parameters))))
        return 0 if len(w0.requests) > before else 1

    assert [sent_to({"sequence_id": 1000}) for _ in range(3)] == [0, 0, 0]
    assert [sent_to({"sequence_id": 1001}) for _ in range(3)] == [1, 1, 1]
    assert {sent_to({"sequence_id": "chat-7"}) for _ in range(3)} == {1}  # by its CRC-32
    assert sent_to({}) == 0 and sent_to({"sequence_id": 0}) == 0, "the least loaded (3 to 6)"
    w1.die()
    assert sent_to({"sequence_id": 1001}) == 0 and sent_to({"sequence_id": 1000}) == 0
    while not all(future.done() for future in w0.requests):
        w0.answer()
    await asyncio.gather(*(execution.result() for execution in sent), return_exceptions=True)
