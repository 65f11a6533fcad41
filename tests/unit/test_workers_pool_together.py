"""A pool that loads an instance into all its holders at once (forked workers), on fakes."""

from __future__ import annotations

import asyncio

import pytest

from inferd.errors import ModelError
from inferd.settings import ServerSettings
from inferd.workers import messages
from inferd.workers.pool import ProcessPool
from tests.support.polling import wait_for_async
from tests.unit.test_workers_pool import FakeWorker, fakes, model

pytestmark = pytest.mark.anyio


async def _pool(workers: int, *, load_together: bool) -> ProcessPool:
    settings = ServerSettings(parallel_workers=workers)
    pool = ProcessPool(settings, make_worker=FakeWorker, load_together=load_together)
    await pool.start()
    return pool


def _loads_received(pool: ProcessPool) -> int:
    return sum(worker.commands.count((messages.LoadInWorker, 1)) for worker in fakes(pool))


@pytest.mark.parametrize(("together", "at_once"), [(True, 3), (False, 1)])
async def test_loads_run_in_all_holders_at_once_only_when_asked(
    together: bool, at_once: int
) -> None:
    pool = await _pool(3, load_together=together)
    gate = asyncio.Event()
    for worker in fakes(pool):
        worker.load_gate = gate
    try:
        loading = asyncio.ensure_future(pool.load(1, model("a")))
        await wait_for_async(lambda: _loads_received(pool) == at_once, "loads sent")
        for _ in range(10):  # every task on this loop gets its turns: none sends more
            await asyncio.sleep(0)
        assert _loads_received(pool) == at_once
        gate.set()
        await loading
        assert pool.capacity(1) == 3 and _loads_received(pool) == 3
    finally:
        await pool.close()


async def test_a_load_failing_in_one_holder_fails_it_everywhere() -> None:
    pool = await _pool(3, load_together=True)
    try:
        fakes(pool)[1].refuse_loading["a"] = ModelError("warm-up failed")
        with pytest.raises(ModelError, match="warm-up failed"):
            await pool.load(1, model("a"))
        assert pool.capacity(1) == 0
        unloads = [worker.commands.count((messages.Unload, 1)) for worker in fakes(pool)]
        assert unloads == [1, 0, 1]  # those that had loaded it unload it
    finally:
        await pool.close()
