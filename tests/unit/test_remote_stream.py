"""RemoteStream, the main process's side of a stream run in a worker: order, ends,
cancel, and the credit that bounds how far the worker runs ahead of the reader."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from inferd.errors import InvalidRequest, WorkerLost
from inferd.types import InferenceResponse, Tensor
from inferd.workers import ipc, messages
from inferd.workers.remote_stream import STREAM_WINDOW, RemoteStream

pytestmark = pytest.mark.anyio


def packed(index: int) -> ipc.PackedResponse:
    return ipc.pack_response(InferenceResponse([Tensor("i", np.array([index]))]))


def index_of(response: InferenceResponse) -> int:
    return int(response.outputs[0].data[0])


class Commands:
    """What the stream sends its worker, in order."""

    def __init__(self) -> None:
        self.sent: list[messages.Credit | messages.Cancel] = []

    def __call__(self, command: messages.Credit | messages.Cancel) -> None:
        self.sent.append(command)

    def of(self, kind: type[messages.Command]) -> list[messages.Command]:
        return [command for command in self.sent if type(command) is kind]


async def test_responses_come_in_order_and_credit_goes_back_in_batches() -> None:
    commands = Commands()
    stream = RemoteStream(commands, window=8)  # credit goes back 2 at a time
    for index in range(4):
        stream.received([packed(index)])
    assert [index_of(await anext(stream))] == [0]
    assert commands.sent == [], "one response taken: not worth a message yet"
    assert index_of(await anext(stream)) == 1
    assert commands.sent == [messages.Credit(2)]
    assert [index_of(await anext(stream)) for _ in range(2)] == [2, 3]
    assert commands.sent == [messages.Credit(2), messages.Credit(2)]


async def test_a_waiting_reader_wakes_for_each_response_then_ends_with_the_worker() -> None:
    commands = Commands()
    stream = RemoteStream(commands)
    reading = asyncio.ensure_future(collect(stream))
    for index in range(3):
        await asyncio.sleep(0)
        stream.received([packed(index)])
    stream.ended()
    assert [index_of(response) for response in await reading] == [0, 1, 2]
    assert stream.finished.done()
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    stream.cancel()
    assert commands.sent == [], "nothing is sent about a stream that ended"


async def test_the_workers_error_comes_after_the_responses_sent_before_it() -> None:
    stream = RemoteStream(Commands())
    for index in range(3):
        stream.received([packed(index)])
    stream.ended(InvalidRequest("bad prompt"))
    assert stream.finished.done()
    assert [index_of(await anext(stream)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(InvalidRequest, match="bad prompt"):
        await anext(stream)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_a_lost_worker_fails_the_stream_and_finishes_it() -> None:
    stream = RemoteStream(Commands())
    reading = asyncio.ensure_future(collect(stream))
    await asyncio.sleep(0)
    stream.received([packed(0)])
    stream.ended(WorkerLost("worker 0 died"))
    with pytest.raises(WorkerLost, match="worker 0 died"):
        await reading
    assert stream.finished.done()


async def test_cancel_asks_the_worker_once_ends_reading_and_finishes_on_its_answer() -> None:
    commands = Commands()
    stream = RemoteStream(commands)
    stream.received([packed(0)])
    assert index_of(await anext(stream)) == 0
    stream.received([packed(1)])
    waiting = RemoteStream(Commands())
    reading = asyncio.ensure_future(anext(waiting))
    await asyncio.sleep(0)

    stream.cancel()
    stream.cancel()
    waiting.cancel()
    assert commands.sent == [messages.Cancel()]
    with pytest.raises(StopAsyncIteration):
        await anext(stream)  # what was queued is dropped: nobody wants it
    with pytest.raises(StopAsyncIteration):
        await reading  # a reader waiting is told the end
    stream.received([packed(2)])  # sent before the worker saw the cancel
    assert not stream.finished.done(), "finished only once the worker stopped the generator"
    stream.ended()
    assert stream.finished.done()
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_an_unreadable_response_fails_the_read_and_cancels_the_stream() -> None:
    commands = Commands()
    stream = RemoteStream(commands)
    stream.received([("not", "a", "response")])  # type: ignore[list-item]
    with pytest.raises(Exception, match="cannot be read"):
        await anext(stream)
    assert commands.of(messages.Cancel) == [messages.Cancel()]


class SimulatedWorker:
    """The worker's side of the credit: it produces only while it holds credit."""

    def __init__(self, window: int, total: int) -> None:
        self.stream = RemoteStream(self.command, window)
        self.credit = window
        self.produced = 0
        self.total = total
        self.in_flight: list[ipc.PackedResponse | None] = []  # sent, not delivered (None: end)
        self.grants: list[int] = []  # granted, not yet arrived
        self.grant_messages = 0

    def command(self, command: messages.Credit | messages.Cancel) -> None:
        assert type(command) is messages.Credit
        self.grants.append(command.amount)
        self.grant_messages += 1

    def can_step(self) -> bool:
        return bool(self.in_flight or self.grants or (self.credit and self.produced < self.total))

    def step(self, rng: random.Random) -> None:
        """One thing happens: a response is produced, one is delivered, or a grant
        arrives."""
        choices = []
        if self.credit and self.produced < self.total:
            choices.append(self.produce)
        if self.in_flight:
            choices.append(self.deliver)
        if self.grants:
            choices.append(self.take_grant)
        if choices:
            rng.choice(choices)()

    def produce(self) -> None:
        self.credit -= 1
        self.in_flight.append(packed(self.produced))
        self.produced += 1
        if self.produced == self.total:
            self.in_flight.append(None)

    def deliver(self) -> None:
        message = self.in_flight.pop(0)
        if message is None:
            self.stream.ended()
        else:
            self.stream.received([message])

    def take_grant(self) -> None:
        self.credit += self.grants.pop(0)


@pytest.mark.parametrize("window", [1, 2, 5, STREAM_WINDOW])
async def test_the_worker_never_runs_more_than_the_window_ahead_and_never_starves(
    window: int,
) -> None:
    rng = random.Random(window)
    total = 300
    worker = SimulatedWorker(window, total)
    taken = 0
    while True:
        reading = asyncio.ensure_future(anext(worker.stream, None))
        await asyncio.sleep(0)
        while not reading.done():
            # The reader waits: the worker must get a response to it on its own.
            assert worker.can_step(), "the worker waits for credit while the reader waits"
            worker.step(rng)
            assert worker.produced - taken <= window
            await asyncio.sleep(0)
        response = reading.result()
        if response is None:
            break
        assert index_of(response) == taken
        taken += 1
        for _ in range(rng.randint(0, 2 * window)):  # the worker gets ahead (or not)
            worker.step(rng)
            assert worker.produced - taken <= window
    assert taken == total and worker.stream.finished.done()
    batch = max(window // 4, 1)
    assert worker.grant_messages <= total // batch, "credit goes back in batches"


async def collect(stream: RemoteStream) -> list[InferenceResponse]:
    return [response async for response in stream]
