"""The process pool's side of sequences, on fake workers: requests go to the holder
named, never retried elsewhere; a restarted worker is a new holder."""

from __future__ import annotations

from typing import Any

import pytest

from inferd.dispatch.sequences import EndSequence
from inferd.errors import WorkerLost
from inferd.workers import messages
from inferd.workers.base import Call
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
