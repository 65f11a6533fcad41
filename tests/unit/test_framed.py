"""The decode loop both event-loop ends of a framed channel use (workers/framed.py)."""

from __future__ import annotations

import logging
import struct

import pytest

from inferd.workers import ipc
from inferd.workers.framed import FramedProtocol


class Collecting(FramedProtocol[tuple[int, str]]):
    def __init__(self) -> None:
        super().__init__(logging.getLogger("test"), "Closing it: unreadable")
        self.got: list[list[tuple[int, str]]] = []
        self.closed = False

    def received(self, messages: list[tuple[int, str]]) -> None:
        self.got.append(messages)

    def close(self) -> None:
        self.closed = True


def feed(protocol: Collecting, data: bytes) -> None:
    buffer = protocol.get_buffer(len(data))
    buffer[: len(data)] = data
    protocol.buffer_updated(len(data))


def frame(message: object) -> bytes:
    return b"".join(bytes(piece) for piece in ipc.encode(message))


def test_each_reads_whole_messages_are_handed_on_together_in_order() -> None:
    protocol = Collecting()
    first, second = frame((1, "a")), frame((2, "b"))
    feed(protocol, first + second[:5])  # the second cut in two
    feed(protocol, second[5:])
    assert protocol.got == [[(1, "a")], [(2, "b")]] and not protocol.closed
    assert protocol.eof_received() is False  # close our end too


def test_a_frame_that_cannot_be_read_closes_it(caplog: pytest.LogCaptureFixture) -> None:
    protocol = Collecting()
    header = b"not a pickle"
    feed(protocol, struct.pack("<II", len(header), 0) + header)
    assert protocol.closed and protocol.got == []
    assert "Closing it: unreadable" in caplog.text
