"""The fork parents' channel (workers/packets.py): each message one packet, one frame
of the worker channel's codec, a file descriptor beside it where one travels."""

from __future__ import annotations

import os
import pickle
import socket
from collections.abc import Iterator

import pytest

from inferd.errors import ModelError
from inferd.settings import ModelSettings, ServerSettings
from inferd.workers import ipc, packets

# One of each message the channel carries, every field set to something not a default.
SAMPLES: dict[type[packets.Message], packets.Message] = {
    packets.LoadModel: packets.LoadModel(
        ["/opt/models", "/usr/lib/python3"],
        ServerSettings(parallel_workers=3),
        ModelSettings(name="iris", implementation="inferd.runtimes.sklearn.SKLearnModel"),
    ),
    packets.Loaded: packets.Loaded(4000),
    packets.LoadFailed: packets.LoadFailed(ipc.error_to_wire(ModelError("no weights"))),
    packets.Unforkable: packets.Unforkable("threads are running (grpc)"),
    packets.ForkWorker: packets.ForkWorker(7),
    packets.Ready: packets.Ready(4001, ["model 'iris'", "model 'forest'"]),
    packets.ForkProtocol: packets.ForkProtocol(8, {"INFERD_PROTOCOL_INDEX": "2", "HOME": "/"}),
    packets.Forked: packets.Forked(9, 4242),
    packets.ForkFailed: packets.ForkFailed(10, "fork failed: out of memory"),
}


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield ours, theirs
    ours.close()
    theirs.close()


def test_every_message_of_the_channel_has_a_sample() -> None:
    assert set(SAMPLES) == set(packets.MESSAGES)


@pytest.mark.parametrize("kind", packets.MESSAGES, ids=lambda kind: kind.__name__)
def test_every_message_arrives_as_the_same_message(
    kind: type[packets.Message], pair: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = pair
    packets.send(ours, SAMPLES[kind])
    received = packets.receive(theirs)
    assert received is not None
    message, fds = received
    assert type(message) is kind
    assert message == SAMPLES[kind]
    assert fds == []


@pytest.mark.parametrize("kind", packets.MESSAGES, ids=lambda kind: kind.__name__)
def test_every_message_arrives_with_the_file_descriptor_beside_it(
    kind: type[packets.Message], pair: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = pair
    read_end, write_end = os.pipe()
    try:
        packets.send(ours, SAMPLES[kind], write_end)
        received = packets.receive(theirs)
        assert received is not None
        message, fds = received
        assert message == SAMPLES[kind]
        assert len(fds) == 1 and fds[0] != write_end
        os.write(fds[0], b"x")  # the same pipe, a new descriptor
        os.close(fds[0])
        assert os.read(read_end, 1) == b"x"
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_packet_is_one_frame_of_the_worker_channels_codec(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    packets.send(ours, packets.Forked(1, 2))
    data = theirs.recv(packets.MAX_MESSAGE)
    assert data == b"".join(bytes(piece) for piece in ipc.encode(packets.Forked(1, 2)))


def test_every_waiting_message_is_handed_on_in_order_then_the_close_is_seen(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    ours.setblocking(False)
    received: list[packets.Message] = []
    assert packets.receive_waiting(ours, received.append)  # nothing yet: still open
    packets.send(theirs, packets.Ready(1, ["m"]))
    packets.send(theirs, packets.Forked(2, 4242))
    assert packets.receive_waiting(ours, received.append)
    assert received == [packets.Ready(1, ["m"]), packets.Forked(2, 4242)]
    theirs.close()
    assert not packets.receive_waiting(ours, received.append)  # the parent exited


@pytest.mark.parametrize(
    "data",
    [
        b"not a frame",
        pickle.dumps(("forked", 2, 4242)),  # the old pickled tuple
        b"".join(bytes(piece) for piece in ipc.encode(("forked", 2, 4242))),  # no message
        b"".join(bytes(piece) for piece in ipc.encode(packets.Loaded(1)))[:-1],  # cut
    ],
    ids=["garbage", "a pickle", "a tuple", "a cut frame"],
)
def test_what_is_no_message_is_refused_and_its_descriptor_closed(
    data: bytes, pair: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = pair
    read_end, write_end = os.pipe()
    try:
        socket.send_fds(ours, [data], [write_end])
        os.close(write_end)  # the copy in flight is now the pipe's last writer
        os.set_blocking(read_end, False)  # a writer left open: BlockingIOError, no hang
        with pytest.raises(ipc.ProtocolError):
            packets.receive(theirs)
        assert os.read(read_end, 1) == b""  # no writer left: the received copy was closed
    finally:
        os.close(read_end)


def test_a_packet_larger_than_a_message_may_be_is_refused(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair
    monkeypatch.setattr(packets, "MAX_MESSAGE", 64)  # a real one cannot be sent that big
    packets.send(ours, SAMPLES[packets.LoadModel])
    with pytest.raises(ipc.ProtocolError, match="larger than 64 bytes"):
        packets.receive(theirs)


def test_a_client_takes_a_parent_that_sends_no_message_for_gone(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    ours.setblocking(False)
    received: list[packets.Message] = []
    packets.send(theirs, packets.Forked(2, 4242))
    theirs.send(b"not a frame")
    assert not packets.receive_waiting(ours, received.append)
    assert received == [packets.Forked(2, 4242)]
