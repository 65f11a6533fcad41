"""The process pool's books for streams, on the fake workers of test_workers_pool:
which worker a stream goes to, what it holds there until it finishes, and what a
worker's death does to it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from inferd.errors import ModelNotReady, WorkerLost
from inferd.settings import ModelSettings, ServerSettings
from inferd.types import InferenceRequest, InferenceResponse, ModelMetadata, Tensor
from inferd.workers import ipc, messages
from inferd.workers.base import Call, LoadedInstance
from inferd.workers.pool import ProcessPool
from inferd.workers.remote_stream import RemoteStream
from tests.support.polling import wait_for_async

from .test_workers_pool import REQUEST, FakeChannel, FakeWorker, fakes, model

pytestmark = pytest.mark.anyio


class StreamingChannel(FakeChannel):
    """A fake channel that opens streams: what they send is recorded, what they
    receive the test hands them."""

    def __init__(self, worker: FakeWorker) -> None:
        super().__init__(worker)
        self.streams: list[RemoteStream] = []
        self.stream_commands: list[messages.Command] = []

    def open_stream(self, instance_id: int, request: InferenceRequest) -> RemoteStream:
        if self.closed:
            raise WorkerLost(self._worker._describe_stream_loss())
        stream = RemoteStream(self.stream_commands.append)
        self.streams.append(stream)
        self._worker.commands.append((messages.Stream, instance_id))
        return stream

    def close(self, unread: int = 0) -> None:
        if not self.closed:
            for stream in self.streams:
                stream.ended(WorkerLost(self._worker._describe_stream_loss()))
        super().close(unread)


class StreamingWorker(FakeWorker):
    """A fake worker whose models stream: those named ``async-*`` interleaved."""

    async def _spawn(self) -> Any:
        self.spawns += 1
        self.channel = StreamingChannel(self)
        return self.channel

    async def _load(self, settings: ModelSettings, future: asyncio.Future[Any]) -> None:
        interleaved = settings.name.startswith("async-")
        metadata = ModelMetadata(name=settings.name)
        future.set_result(LoadedInstance(metadata, streams=True, interleaved_streams=interleaved))

    def streams(self) -> list[RemoteStream]:
        return self.channel.streams  # type: ignore[attr-defined, no-any-return]


@pytest.fixture
async def pool() -> AsyncIterator[ProcessPool]:
    pool = ProcessPool(ServerSettings(parallel_workers=2), make_worker=StreamingWorker)
    await pool.start()
    yield pool
    await pool.close()


def workers(pool: ProcessPool) -> list[StreamingWorker]:
    return [worker for worker in fakes(pool) if isinstance(worker, StreamingWorker)]


def packed_response() -> ipc.PackedResponse:
    return ipc.pack_response(InferenceResponse([Tensor("y", np.ones(1))]))


async def test_interleaved_streams_hold_no_slot_and_go_where_fewest_are_open(
    pool: ProcessPool,
) -> None:
    w0, w1 = workers(pool)
    await pool.load(1, model("async-chat", threads_per_worker=1))
    first = pool.stream(Call(1, REQUEST))
    second = pool.stream(Call(1, REQUEST))
    third = pool.stream(Call(1, REQUEST))
    assert (len(w0.streams()), len(w1.streams())) == (2, 1)
    assert (w0.open_streams, w1.open_streams) == (2, 1)
    assert (w0.free_slots(1), w1.free_slots(1), w0.outstanding) == (1, 1, 0), "no slot taken"

    for stream in (first, third):
        stream.cancel()
    assert w0.channel.stream_commands == [messages.Cancel(), messages.Cancel()]  # type: ignore[attr-defined]
    assert w0.open_streams == 2, "open until the worker says the generator stopped"
    for stream in w0.streams():
        stream.ended()
    await asyncio.sleep(0)  # the finished callbacks run
    assert (w0.open_streams, w1.open_streams) == (0, 1)
    pool.stream(Call(1, REQUEST))
    assert len(w0.streams()) == 3, "now the one with fewer open"
    assert not second.finished.done()


async def test_a_plain_generators_stream_holds_a_slot_of_its_worker_until_finished(
    pool: ProcessPool,
) -> None:
    w0, w1 = workers(pool)
    await pool.load(1, model("plain", threads_per_worker=1))
    stream = pool.stream(Call(1, REQUEST))
    (busy,) = [worker for worker in (w0, w1) if worker.streams()]
    (idle,) = [worker for worker in (w0, w1) if worker is not busy]
    assert (busy.free_slots(1), busy.outstanding, busy.open_streams) == (0, 1, 0)
    request = pool.predict(Call(1, REQUEST))
    assert len(idle.requests) == 1, "a request goes to the worker with its slot free"
    idle.answer()
    assert (await request.result()).outputs[0].name == "y"

    busy.streams()[0].received([packed_response()])
    assert (await anext(stream)).outputs[0].name == "y"
    busy.streams()[0].ended()
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    await asyncio.sleep(0)
    assert (busy.free_slots(1), busy.outstanding) == (1, 0)


async def test_a_worker_that_dies_fails_its_streams_and_frees_what_they_held() -> None:
    pool = ProcessPool(ServerSettings(parallel_workers=1), make_worker=StreamingWorker)
    await pool.start()
    try:
        (worker,) = workers(pool)
        await pool.load(1, model("plain"))
        await pool.load(2, model("async-chat"))
        plain, interleaved = pool.stream(Call(1, REQUEST)), pool.stream(Call(2, REQUEST))
        worker.streams()[0].received([packed_response()])
        worker.die()
        assert (await anext(plain)).outputs[0].name == "y", "what arrived is read first"
        message = r"this stream \(worker 0 \(pid None\)\) stopped; it is being restarted\. A"
        for stream in (plain, interleaved):
            with pytest.raises(WorkerLost, match=message + " stream cannot be resumed"):
                await anext(stream)
            assert stream.finished.done()
        await asyncio.sleep(0)  # the finished callbacks run
        assert (worker.outstanding, worker.open_streams) == (0, 0)
        with pytest.raises(WorkerLost, match="No worker process holding model"):
            pool.stream(Call(2, REQUEST))
        await wait_for_async(
            lambda: worker.alive and worker.serves(1) and worker.serves(2),
            "worker.alive and worker.serves(1) and worker.serves(2)",
            timeout=5,
        )
        pool.stream(Call(2, REQUEST))
        assert len(worker.streams()) == 1 and worker.open_streams == 1, "on its new channel"
        with pytest.raises(ModelNotReady, match="no longer loaded"):
            pool.stream(Call(99, REQUEST))
    finally:
        await pool.close()
