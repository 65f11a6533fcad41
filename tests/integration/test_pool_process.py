"""The real process pool: two worker processes serving a tiny runtime from a model folder."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.errors import WorkerLost
from inferd.settings import ModelSettings, ServerSettings
from inferd.settings.loader import model_settings_from_dict
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers.base import Call
from inferd.workers.pool import ProcessPool
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio

RUNTIME = """
import os
import threading
import time
from pathlib import Path

import numpy as np

from inferd import InferenceResponse, Model, Tensor

TOGETHER = threading.Barrier(2)  # per process: passes only when two requests run at once


class Tiny(Model):
    def predict(self, request):
        what = request.parameters.get("do")
        if what == "together":
            TOGETHER.wait(20)
        elif what == "exit":
            os._exit(3)
        elif what == "hang":
            Path(request.parameters["started"]).touch()
            time.sleep(60)
        doubled = request.inputs[0].data * 2
        outputs = [Tensor("doubled", doubled), Tensor("pid", np.array([os.getpid()]))]
        return InferenceResponse(outputs)
"""
IN_BOTH, IN_ONE = 1, 2  # instance ids: loaded in both workers, and in one
X = np.array([[1.5, -2.0, 3.25]], dtype=np.float32)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    (folder / "tiny.py").write_text(RUNTIME)
    return folder


def tiny(folder: Path, name: str, **fields: Any) -> ModelSettings:
    body = {"name": name, "implementation": "tiny.Tiny", "threads_per_worker": 2, **fields}
    return model_settings_from_dict(body, folder / "model-settings.json")


@pytest.fixture(scope="module")
async def pool(folder: Path) -> AsyncIterator[ProcessPool]:
    pool = ProcessPool(ServerSettings(parallel_workers=2))
    await pool.start()
    try:
        await pool.load(IN_BOTH, tiny(folder, "tiny-both"))
        # Not retried: a request killed with its worker fails (and a "hang" hangs once).
        await pool.load(IN_ONE, tiny(folder, "tiny-one", workers=1, retry_on_worker_failure=False))
        yield pool
    finally:
        await pool.close()


def request(**parameters: Any) -> InferenceRequest:
    return InferenceRequest([Tensor("x", X)], parameters=parameters)


def pid_of(response: InferenceResponse) -> int:
    return int(response.outputs[1].data[0])


async def test_a_request_runs_in_a_worker_process_and_comes_back_whole(
    pool: ProcessPool,
) -> None:
    assert (pool.capacity(IN_BOTH), pool.capacity(IN_ONE)) == (4, 2)
    response = await pool.predict(Call(IN_BOTH, request())).result()
    doubled = response.outputs[0].data
    assert doubled.dtype == np.float32 and doubled.shape == (1, 3)
    np.testing.assert_array_equal(doubled, X * 2)
    assert pid_of(response) in {worker.pid for worker in pool.workers} - {os.getpid()}


async def test_threads_per_worker_runs_that_many_requests_at_once(pool: ProcessPool) -> None:
    both = [pool.predict(Call(IN_ONE, request(do="together"))).result() for _ in range(2)]
    responses = await asyncio.wait_for(asyncio.gather(*both), 30)
    assert pid_of(responses[0]) == pid_of(responses[1]), "in the one worker holding it"


async def test_a_worker_killed_mid_request_fails_it_and_comes_back_to_serve(
    pool: ProcessPool, folder: Path
) -> None:
    (holder,) = [worker for worker in pool.workers if worker.serves(IN_ONE)]
    killed_pid = holder.pid
    assert killed_pid is not None
    started = folder / "started"
    running = pool.predict(Call(IN_ONE, request(do="hang", started=str(started))))
    await wait_for_async(started.exists, "started.exists", timeout=60)

    os.kill(killed_pid, signal.SIGKILL)
    with pytest.raises(WorkerLost, match=r"stopped before answering; it is being restarted"):
        await asyncio.wait_for(running.result(), 10)
    assert pool.capacity(IN_BOTH) == 2, "the other worker serves on"
    served = await pool.predict(Call(IN_BOTH, request())).result()
    assert pid_of(served) != killed_pid

    await wait_for_async(
        lambda: pool.capacity(IN_ONE) == 2 and pool.capacity(IN_BOTH) == 4,
        "pool.capacity(IN_ONE) == 2 and pool.capacity(IN_BOTH) == 4",
        timeout=60,
    )
    response = await pool.predict(Call(IN_ONE, request())).result()
    assert pid_of(response) == holder.pid != killed_pid
    assert holder.restarts == 1


async def test_a_request_that_kills_its_worker_alone_is_the_suspect_and_not_retried(
    pool: ProcessPool,
) -> None:
    """Retried, it would kill the other worker too (and the requests running there)."""
    await wait_for_async(lambda: pool.capacity(IN_BOTH) == 4, "both workers serving", timeout=60)
    pids = {worker.index: worker.pid for worker in pool.workers}
    with pytest.raises(WorkerLost, match=r"it was the only request running there: .* not retried"):
        await asyncio.wait_for(pool.predict(Call(IN_BOTH, request(do="exit"))).result(), 30)
    await wait_for_async(
        lambda: pool.capacity(IN_BOTH) == 4 and pool.capacity(IN_ONE) == 2,
        "the dead one restarted",
        timeout=60,
    )
    unchanged = [worker for worker in pool.workers if worker.pid == pids[worker.index]]
    assert len(unchanged) == 1, "one worker died, the other lives on"
    response = await pool.predict(Call(IN_BOTH, request())).result()
    assert np.array_equal(response.outputs[0].data, X * 2)
