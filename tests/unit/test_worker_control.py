"""A worker applies a control message it is sent, in order, and answers it; one whose
apply fails is answered with the error and the worker serves on."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from inferd.workers import ipc, messages
from inferd.workers.base import OnHolder, WorkerState
from inferd.workers.worker import Worker

APPLIED: list[tuple[str, bool]] = []  # (what, whether the worker held instance 1)


@dataclass(frozen=True)
class Note:
    """A control message of a test's own: the worker needs nothing of its class."""

    what: str

    def destination(self) -> OnHolder | None:
        return None

    def apply_in_worker(self, worker: WorkerState) -> None:
        if self.what == "fail":
            raise RuntimeError("this message cannot apply")
        APPLIED.append((self.what, worker.loaded(1) is not None))


@pytest.fixture
def worker() -> Iterator[socket.socket]:
    ours, theirs = socket.socketpair()
    serving = threading.Thread(target=Worker(theirs).serve, daemon=True)
    serving.start()
    yield ours
    ours.close()  # the worker sees EOF and stops
    serving.join(timeout=10)
    assert not serving.is_alive()


def call(sock: socket.socket, call_id: int, command: messages.Command) -> messages.Reply:
    ipc.send(sock, messages.encode_command(call_id, 0, command))
    decoder: ipc.FrameDecoder[messages.Reply] = ipc.FrameDecoder()
    replies = ipc.receive(sock, decoder)
    assert replies is not None, "the worker closed its socket"
    (reply,) = replies
    return reply


def test_a_control_message_is_applied_in_order_and_answered(worker: socket.socket) -> None:
    APPLIED.clear()
    assert call(worker, 1, messages.ApplyControl(Note("first"))) == (messages.RESULT, 1, None)
    assert call(worker, 2, messages.ApplyControl(Note("second"))) == (messages.RESULT, 2, None)
    assert APPLIED == [("first", False), ("second", False)]


def test_a_message_that_fails_is_answered_with_its_error_and_the_worker_goes_on(
    worker: socket.socket,
) -> None:
    APPLIED.clear()
    kind, call_id, error = call(worker, 1, messages.ApplyControl(Note("fail")))
    assert (kind, call_id) == (messages.ERROR, 1)
    assert "Note: this message cannot apply" in str(error)
    assert call(worker, 2, messages.ApplyControl(Note("after"))) == (messages.RESULT, 2, None)
    assert APPLIED == [("after", False)]
