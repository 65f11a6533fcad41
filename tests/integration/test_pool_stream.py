"""Streams through a real worker process: each response crosses as it is yielded,
cancel and errors reach the generator, a slow reader holds it back, a dead worker
fails the stream, and the worker answers other requests meanwhile."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.dispatch.scheduler import Scheduler
from inferd.errors import ModelError, WorkerLost
from inferd.settings import ModelSettings, ServerSettings
from inferd.settings.loader import model_settings_from_dict
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers.base import Call, ResponseStream
from inferd.workers.pool import ProcessPool
from inferd.workers.remote_stream import STREAM_WINDOW
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio

RUNTIME = """
import asyncio
import os
import time
from pathlib import Path

import numpy as np

from inferd import InferenceResponse, Model, Tensor


def response(index):
    outputs = [Tensor("index", np.array([index])), Tensor("at", np.array([time.time()])),
               Tensor("pid", np.array([os.getpid()]))]
    return InferenceResponse(outputs)


def record(path, count):
    with open(path + ".tmp", "w") as file:
        file.write(str(count))
    os.replace(path + ".tmp", path)  # whole, for a reader in another process


class Plain(Model):
    def predict_stream(self, request):
        asks = request.parameters
        yielded = 0
        try:
            for index in range(int(asks.get("n", 1))):
                if index == asks.get("fail_at"):
                    raise ValueError(f"failed after {index}")
                time.sleep(asks.get("hang", 60) if index == asks.get("hang_at") else 0)
                time.sleep(asks.get("delay", 0))
                yielded += 1
                if "record" in asks:
                    record(asks["record"], yielded)
                yield response(index)
        finally:
            if "closed" in asks:
                record(asks["closed"], yielded)


class Async(Model):
    async def predict_stream(self, request):
        asks = request.parameters
        yielded = 0
        try:
            for index in range(int(asks.get("n", 1))):
                if index == asks.get("fail_at"):
                    raise ValueError(f"failed after {index}")
                await asyncio.sleep(asks.get("hang", 60) if index == asks.get("hang_at") else 0)
                await asyncio.sleep(asks.get("delay", 0))
                yielded += 1
                if "record" in asks:
                    record(asks["record"], yielded)
                yield response(index)
        finally:
            if "closed" in asks:
                record(asks["closed"], yielded)


class Echo(Model):
    def predict(self, request):
        return response(-1)
"""
PLAIN, ASYNC, ECHO = 1, 2, 3  # instance ids
X = np.zeros((1, 2), dtype=np.float32)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("streams")
    (folder / "streams.py").write_text(RUNTIME)
    return folder


def settings(folder: Path, implementation: str) -> ModelSettings:
    body = {"name": implementation.lower(), "implementation": f"streams.{implementation}"}
    return model_settings_from_dict(body, folder / "model-settings.json")


@pytest.fixture(scope="module")
async def pool(folder: Path) -> AsyncIterator[ProcessPool]:
    pool = ProcessPool(ServerSettings(parallel_workers=1))
    await pool.start()
    try:
        for instance_id, implementation in ((PLAIN, "Plain"), (ASYNC, "Async"), (ECHO, "Echo")):
            await pool.load(instance_id, settings(folder, implementation))
        yield pool
    finally:
        await pool.close()


def request(**parameters: Any) -> InferenceRequest:
    return InferenceRequest([Tensor("x", X)], parameters=parameters)


def index_of(response: InferenceResponse) -> int:
    return int(response.outputs[0].data[0])


def pid_of(response: InferenceResponse) -> int:
    return int(response.outputs[2].data[0])


def recorded(path: Path) -> int:
    """What the generator wrote there (how many it yielded); 0 before it wrote."""
    return int(path.read_text()) if path.exists() else 0


async def take(stream: ResponseStream, count: int) -> list[InferenceResponse]:
    return [await asyncio.wait_for(anext(stream), 30) for _ in range(count)]


async def finish(stream: ResponseStream) -> None:
    await asyncio.wait_for(asyncio.shield(stream.finished), 30)


@pytest.mark.parametrize("instance_id", [PLAIN, ASYNC], ids=["generator", "async-generator"])
async def test_each_response_arrives_in_order_before_the_next_is_produced(
    pool: ProcessPool, instance_id: int
) -> None:
    stream = pool.stream(Call(instance_id, request(n=4, delay=0.15)))
    arrivals: list[tuple[int, float, float]] = []  # (index, produced at, arrived at)
    async for response in stream:
        arrivals.append((index_of(response), float(response.outputs[1].data[0]), time.time()))
    assert [index for index, _, _ in arrivals] == [0, 1, 2, 3]
    for (_, _, arrived), (_, next_produced, _) in itertools.pairwise(arrivals):
        assert arrived < next_produced, "a response waited for the next one"
    await finish(stream)


@pytest.mark.parametrize("instance_id", [PLAIN, ASYNC], ids=["generator", "async-generator"])
async def test_a_cancel_runs_the_generators_finally_in_the_worker_which_then_serves_on(
    pool: ProcessPool, instance_id: int, tmp_path: Path
) -> None:
    closed = tmp_path / "closed"
    stream = pool.stream(Call(instance_id, request(n=1000, delay=0.01, closed=str(closed))))
    assert [index_of(response) for response in await take(stream, 2)] == [0, 1]
    stream.cancel()
    stream.cancel()
    await finish(stream)
    assert 2 <= recorded(closed) <= 2 + STREAM_WINDOW, "its finally ran before the end"
    with pytest.raises(StopAsyncIteration):
        await anext(stream)

    (worker,) = pool.workers
    assert (worker.outstanding, worker.open_streams) == (0, 0)
    again = pool.stream(Call(instance_id, request(n=3)))
    assert [index_of(response) async for response in again] == [0, 1, 2]
    served = await pool.predict(Call(ECHO, request())).result()
    assert pid_of(served) == worker.pid


@pytest.mark.parametrize("instance_id", [PLAIN, ASYNC], ids=["generator", "async-generator"])
async def test_an_error_after_three_responses_reaches_the_reader_after_them(
    pool: ProcessPool, instance_id: int
) -> None:
    stream = pool.stream(Call(instance_id, request(n=10, fail_at=3)))
    taken: list[int] = []
    with pytest.raises(ModelError, match=r"failed: ValueError: failed after 3$"):
        async for response in stream:
            taken.append(index_of(response))
    assert taken == [0, 1, 2]
    await finish(stream)


@pytest.mark.parametrize("instance_id", [PLAIN, ASYNC], ids=["generator", "async-generator"])
async def test_a_slow_reader_holds_the_generator_within_the_window(
    pool: ProcessPool, instance_id: int, tmp_path: Path
) -> None:
    counter = tmp_path / "yielded"
    total = 300
    stream = pool.stream(Call(instance_id, request(n=total, record=str(counter))))
    batch = STREAM_WINDOW // 4  # credit goes back a quarter window at a time
    read = 0
    while read < 2 * STREAM_WINDOW:
        # It runs ahead as far as the credit given back so far lets it, and no further.
        granted = STREAM_WINDOW + read // batch * batch
        await wait_for_async(
            lambda: recorded(counter) >= granted,  # noqa: B023
            "recorded(counter) >= granted",
            timeout=30,
        )
        assert recorded(counter) <= read + STREAM_WINDOW
        assert index_of((await take(stream, 1))[0]) == read
        read += 1
    stream.cancel()
    await finish(stream)
    assert recorded(counter) <= read + STREAM_WINDOW < total


async def test_the_worker_answers_other_requests_while_an_async_stream_waits(
    pool: ProcessPool, tmp_path: Path
) -> None:
    closed = tmp_path / "closed"
    waiting = pool.stream(Call(ASYNC, request(n=3, hang_at=1, closed=str(closed))))
    assert [index_of(response) for response in await take(waiting, 1)] == [0]

    echoed = await asyncio.wait_for(pool.predict(Call(ECHO, request())).result(), 30)
    other = pool.stream(Call(ASYNC, request(n=3)))
    plain = pool.stream(Call(PLAIN, request(n=3)))
    assert [index_of(response) async for response in other] == [0, 1, 2]
    assert [index_of(response) async for response in plain] == [0, 1, 2]
    assert pid_of(echoed) == pool.workers[0].pid
    assert not waiting.finished.done(), "still waiting between its yields"

    waiting.cancel()
    await finish(waiting)
    assert recorded(closed) == 1


async def test_a_plain_stream_holds_its_schedulers_slot_until_the_worker_stopped_it(
    pool: ProcessPool, folder: Path
) -> None:
    scheduler = Scheduler(pool, PLAIN, settings(folder, "Plain"))
    first = scheduler.stream(request(n=1000, delay=0.01))
    second = scheduler.stream(request(n=2))
    assert index_of((await anext(first))[0]) == 0
    waiting = asyncio.ensure_future(anext(second))
    await wait_for_async(lambda: scheduler.waiting == 1, "scheduler.waiting == 1", timeout=30)
    assert not waiting.done(), "one slot (threads_per_worker: 1), and the first holds it"

    await first.aclose()  # the client left: the stream is cancelled in the worker
    got = [index_of(r) for r in await asyncio.wait_for(waiting, 30)]
    assert got + [index_of(r) async for ready in second for r in ready] == [0, 1]
    await asyncio.wait_for(scheduler.close(), 30)
    assert scheduler.in_flight == 0


async def test_a_worker_killed_mid_stream_fails_it_with_worker_lost(pool: ProcessPool) -> None:
    (worker,) = pool.workers
    killed_pid = worker.pid
    assert killed_pid is not None
    stream = pool.stream(Call(PLAIN, request(n=3, hang_at=1)))
    assert [index_of(response) for response in await take(stream, 1)] == [0]

    os.kill(killed_pid, signal.SIGKILL)
    with pytest.raises(WorkerLost, match="it is being restarted"):
        await asyncio.wait_for(anext(stream), 30)
    await finish(stream)
    assert (worker.outstanding, worker.open_streams) == (0, 0)

    await wait_for_async(
        lambda: pool.capacity(PLAIN) == 1 and pool.capacity(ASYNC) == 1,
        "pool.capacity(PLAIN) == 1 and pool.capacity(ASYNC) == 1",
        timeout=30,
    )
    again = pool.stream(Call(ASYNC, request(n=2)))
    responses = [response async for response in again]
    assert [index_of(r) for r in responses] == [0, 1] and pid_of(responses[0]) != killed_pid
