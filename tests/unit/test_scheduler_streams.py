"""Scheduler.stream: slots for plain-generator streams, a bound for interleaved ones."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from inferd.dispatch.scheduler import Scheduler
from inferd.errors import ModelError, Overloaded
from inferd.observability.stats import ModelStats
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers.base import Call, Execution, StreamBase

pytestmark = pytest.mark.anyio


class FakeStream(StreamBase):
    """Yields the responses the test feeds it; records whether it was cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.feed: asyncio.Queue[InferenceResponse | BaseException | None] = asyncio.Queue()
        self.cancelled = False

    async def __anext__(self) -> InferenceResponse:
        item = await self.feed.get()
        if item is None:
            self._finish()
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._finish()
            raise item
        return item

    def cancel(self) -> None:
        if not self._finished.done():
            self.cancelled = True
            self._finish()


class StreamPool:
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self.streams: list[FakeStream] = []

    def capacity(self, instance_id: int) -> int:
        return self._capacity

    def restarting(self, instance_id: int) -> bool:
        return False

    def watch(self, instance_id: int, on_capacity_change: Callable[[], None]) -> None:
        """Capacity never changes here."""

    def stream(self, call: Call) -> FakeStream:
        self.streams.append(FakeStream())
        return self.streams[-1]

    def predict(self, call: Call) -> Execution:
        raise AssertionError("streams only")


def response(value: int) -> InferenceResponse:
    return InferenceResponse([Tensor("y", np.array([value]))])


def request() -> InferenceRequest:
    return InferenceRequest([Tensor("x", np.array([1.0]))])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def collect(scheduler: Scheduler, into: list[int]) -> None:
    async for ready in scheduler.stream(request()):
        into.extend(int(answer.outputs[0].data[0]) for answer in ready)


def scheduler(pool: StreamPool, interleaved: bool, **settings: object) -> Scheduler:
    model = ModelSettings(name="m", **settings)  # type: ignore[arg-type]
    return Scheduler(pool, 1, model, ModelStats("m", None), interleaved)  # type: ignore[arg-type]


async def test_a_plain_generator_stream_holds_its_slot_until_it_finishes() -> None:
    pool = StreamPool(capacity=1)
    streams = scheduler(pool, interleaved=False)
    first: list[int] = []
    second: list[int] = []
    tasks = [asyncio.create_task(collect(streams, out)) for out in (first, second)]
    await settle()
    assert len(pool.streams) == 1 and streams.waiting == 1, "the second waits for the slot"
    for value in (1, 2):
        pool.streams[0].feed.put_nowait(response(value))
    pool.streams[0].feed.put_nowait(None)
    await settle()
    assert first == [1, 2] and len(pool.streams) == 2, "the slot went to the waiting stream"
    pool.streams[1].feed.put_nowait(None)
    await asyncio.gather(*tasks)
    assert (streams.in_flight, streams.waiting) == (0, 0)


async def test_a_reader_that_stops_cancels_the_stream_and_frees_the_slot() -> None:
    pool = StreamPool(capacity=1)
    streams = scheduler(pool, interleaved=False)
    reader = streams.stream(request())
    first = asyncio.ensure_future(anext(reader))
    await settle()
    pool.streams[0].feed.put_nowait(response(7))
    assert [int(r.outputs[0].data[0]) for r in await first] == [7]
    await reader.aclose()
    await settle()  # the slot is given back from the stream's finished callback
    assert pool.streams[0].cancelled and streams.in_flight == 0


async def test_the_models_error_ends_the_stream_and_frees_the_slot() -> None:
    pool = StreamPool(capacity=1)
    streams = scheduler(pool, interleaved=False)
    got: list[int] = []
    task = asyncio.create_task(collect(streams, got))
    await settle()
    pool.streams[0].feed.put_nowait(response(1))
    pool.streams[0].feed.put_nowait(ModelError("broke"))
    with pytest.raises(ModelError, match="broke"):
        await task
    assert got == [1] and streams.in_flight == 0


async def test_interleaved_streams_take_no_slot_and_are_bounded() -> None:
    pool = StreamPool(capacity=1)
    streams = scheduler(pool, interleaved=True, max_concurrent_streams=2)
    tasks = [asyncio.create_task(collect(streams, [])) for _ in range(2)]
    await settle()
    assert len(pool.streams) == 2 and streams.in_flight == 0 and streams.open_streams == 2
    with pytest.raises(Overloaded, match="max_concurrent_streams") as refused:
        await anext(streams.stream(request()))
    assert refused.value.retry_after is not None
    pool.streams[0].feed.put_nowait(None)
    await settle()
    assert streams.open_streams == 1
    closing = asyncio.create_task(streams.close())
    await settle()
    assert not closing.done(), "close waits for the open stream"
    pool.streams[1].feed.put_nowait(None)
    await asyncio.wait_for(closing, 1)
    await asyncio.gather(*tasks)


async def test_a_queued_stream_whose_client_leaves_never_starts() -> None:
    pool = StreamPool(capacity=1)
    streams = scheduler(pool, interleaved=False)
    running = asyncio.create_task(collect(streams, []))
    leaving = asyncio.create_task(collect(streams, []))
    await settle()
    leaving.cancel()
    await settle()
    assert streams.waiting == 0 and len(pool.streams) == 1
    pool.streams[0].feed.put_nowait(None)
    await running
    assert streams.in_flight == 0
