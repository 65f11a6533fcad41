"""Streams on a worker's channel, over a real socket pair with a scripted worker
thread at the other end: routing, credit and cancel on the wire, errors, loss."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from inferd.errors import InvalidRequest, WorkerLost
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers import ipc, messages
from inferd.workers.channel import Channel

pytestmark = pytest.mark.anyio

REQUEST = InferenceRequest([Tensor("x", np.arange(3.0))], parameters={"n": 3})


class ScriptedWorker:
    """The worker's end of the socket, run in a thread: reads commands in order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._decoder: ipc.FrameDecoder[messages.WireCommand] = ipc.FrameDecoder()
        self._received: list[messages.WireCommand] = []

    def command(self) -> messages.WireCommand:
        while not self._received:
            received = ipc.receive(self.sock, self._decoder)
            assert received is not None, "the channel closed"
            self._received += received
        return self._received.pop(0)

    def reply(self, kind: int, call_id: int, body: object) -> None:
        ipc.send(self.sock, messages.encode_reply(kind, call_id, body))

    def respond(self, call_id: int, index: int) -> None:
        response = InferenceResponse([Tensor("i", np.array([index]))])
        self.reply(messages.STREAMED, call_id, [ipc.pack_response(response)])


@pytest.fixture
def wire() -> Iterator[tuple[socket.socket, ScriptedWorker]]:
    ours, theirs = socket.socketpair()
    yield ours, ScriptedWorker(theirs)
    theirs.close()


def in_thread(script: Callable[[], None]) -> threading.Thread:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            script()
        except BaseException as error:  # reported by the test through the thread's result
            errors.append(error)
            raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.errors = errors  # type: ignore[attr-defined]
    return thread


def index_of(response: InferenceResponse) -> int:
    return int(response.outputs[0].data[0])


async def test_stream_replies_reach_the_stream_and_its_credit_and_cancel_reach_the_worker(
    wire: tuple[socket.socket, ScriptedWorker],
) -> None:
    ours, worker = wire
    channel = await Channel.open(ours, lambda: "gone", lambda: None)
    seen: list[messages.WireCommand] = []

    def script() -> None:
        stream_command, predict = worker.command(), worker.command()
        seen.extend([stream_command, predict])
        stream_id = stream_command[1]
        worker.respond(stream_id, 0)
        worker.reply(messages.RESULT, predict[1], "unary answer")
        worker.respond(stream_id, 1)
        seen.append(worker.command())  # the credit for the two taken
        worker.respond(stream_id, 2)
        seen.append(worker.command())  # the cancel
        worker.reply(messages.ENDED, stream_id, None)

    thread = in_thread(script)
    stream = channel.open_stream(4, REQUEST, window=8)  # credit goes back 2 at a time
    call = channel.start_call(messages.Predict("unary"), 9)  # type: ignore[arg-type]
    assert [index_of(await anext(stream)) for _ in range(2)] == [0, 1]
    assert await call == "unary answer"
    assert index_of(await anext(stream)) == 2
    stream.cancel()
    await asyncio.wait_for(stream.finished, 5)
    await asyncio.to_thread(thread.join, 5)
    assert not thread.errors  # type: ignore[attr-defined]

    (kind, stream_id, instance_id, packed_request, window), predict, credit, cancel = seen
    assert (kind, instance_id) == (messages.Stream.KIND, 4)
    assert window == 8
    assert ipc.unpack_request(packed_request).parameters == {"n": 3}
    assert predict[0] == messages.Predict.KIND and predict[1] != stream_id
    assert (credit[0], credit[1], credit[3]) == (messages.Credit.KIND, stream_id, 2)
    assert (cancel[0], cancel[1]) == (messages.Cancel.KIND, stream_id)
    channel.close()


async def test_the_workers_error_ends_the_stream_after_its_responses(
    wire: tuple[socket.socket, ScriptedWorker],
) -> None:
    ours, worker = wire
    channel = await Channel.open(ours, lambda: "gone", lambda: None)

    def script() -> None:
        stream_id = worker.command()[1]
        for index in range(3):
            worker.respond(stream_id, index)
        worker.reply(messages.ERROR, stream_id, ipc.error_to_wire(InvalidRequest("bad prompt")))

    thread = in_thread(script)
    stream = channel.open_stream(1, REQUEST)
    taken = []
    with pytest.raises(InvalidRequest, match="bad prompt"):
        async for response in stream:
            taken.append(index_of(response))
    assert taken == [0, 1, 2] and stream.finished.done()
    await asyncio.to_thread(thread.join, 5)
    stream.cancel()  # it ended: nothing goes out (the worker would not answer)
    channel.close()


async def test_a_worker_that_dies_mid_stream_fails_it_with_worker_lost(
    wire: tuple[socket.socket, ScriptedWorker],
) -> None:
    ours, worker = wire
    closed = asyncio.Event()
    channel = await Channel.open(ours, lambda: "worker 0 died", closed.set)

    def script() -> None:
        worker.respond(worker.command()[1], 0)
        worker.sock.close()

    in_thread(script)
    stream = channel.open_stream(1, REQUEST)
    assert index_of(await anext(stream)) == 0
    with pytest.raises(WorkerLost, match="worker 0 died"):
        await asyncio.wait_for(anext(stream), 5)
    assert stream.finished.done()
    await asyncio.wait_for(closed.wait(), 5)
    with pytest.raises(WorkerLost):
        channel.open_stream(1, REQUEST)
    stream.cancel()  # nothing to send it on, and nothing happens
