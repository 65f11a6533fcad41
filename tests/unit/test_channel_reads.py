"""A worker says which requests it read before running them; a request still unread
when its worker's socket closes fails as one that never ran (WorkerLostUnread) and is
not counted as running at the death. Over a real socket pair."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from inferd.errors import WorkerLost, WorkerLostUnread
from inferd.types import InferenceRequest, Tensor
from inferd.workers import ipc, messages
from inferd.workers.channel import Channel
from inferd.workers.worker import Worker

pytestmark = pytest.mark.anyio

PACKED = ipc.pack_request(InferenceRequest([Tensor("x", np.arange(3.0))]))


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    theirs.close()


async def outcomes(futures: list[asyncio.Future[object]]) -> list[type[BaseException]]:
    done = await asyncio.gather(*futures, return_exceptions=True)
    return [type(error) for error in done if isinstance(error, BaseException)]


async def test_requests_sent_after_the_last_one_read_fail_as_unread(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    closed = asyncio.Event()
    channel = await Channel.open(ours, lambda: "lost", closed.set, reads_acknowledged=True)
    read = channel.start_call(messages.Predict(PACKED))
    control = channel.start_call(messages.Unload())
    unread = [channel.start_call(messages.Predict(PACKED)) for _ in range(2)]
    ipc.send(theirs, messages.encode_reply(messages.READ, 0, None))  # it read call 0
    theirs.close()
    await asyncio.wait_for(closed.wait(), 10)
    assert await outcomes([read, control]) == [WorkerLost, WorkerLost]
    assert await outcomes(unread) == [WorkerLostUnread, WorkerLostUnread]
    assert channel.unread_work == 2, "the Unload is no request"


async def test_a_channel_whose_other_end_says_nothing_of_reads_counts_none_unread(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """The model host sends no READ: its calls fail as before."""
    ours, theirs = pair
    closed = asyncio.Event()
    channel = await Channel.open(ours, lambda: "lost", closed.set)
    sent = channel.start_call(messages.Predict(PACKED))
    theirs.close()
    await asyncio.wait_for(closed.wait(), 10)
    assert await outcomes([sent]) == [WorkerLost]
    assert channel.unread_work == 0


def test_a_worker_acknowledges_the_last_request_of_what_it_read(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    worker = Worker(theirs)
    read = [
        (messages.Predict.KIND, 4, 1, PACKED),
        (messages.Stream.KIND, 5, 1, PACKED, 8),
        (messages.Credit.KIND, 5, 0, 8),
    ]
    worker._acknowledge(read)
    worker._acknowledge([(messages.Credit.KIND, 5, 0, 8)])  # no request: nothing sent
    ours.settimeout(10)
    decoder: ipc.FrameDecoder[messages.Reply] = ipc.FrameDecoder()
    assert ipc.receive(ours, decoder) == [(messages.READ, 5, None)]
    ours.setblocking(False)
    with pytest.raises(BlockingIOError):
        ours.recv(1)
    ours.close()
