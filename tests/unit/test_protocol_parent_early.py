"""supervisor/protocol_forks.py fork_parent_early: the parent is forked from the
supervisor only when nothing makes the fork unsafe; else it is started afresh later.
fork_early, which forks it and the loading server's gRPC health process."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading
from collections.abc import Awaitable

import pytest

from inferd.supervisor.protocol_forks import fork_early, fork_parent_early

DEADLINE = 10.0


def test_a_running_thread_leaves_the_parent_to_be_started_afresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="busy", daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.INFO, "inferd.supervisor.protocol_forks"):
            assert fork_parent_early("/nonexistent") is None
    finally:
        release.set()
        thread.join()
    # Other tests of the same run may leave threads of their own: the message names them all.
    said = caplog.text.partition("started afresh: threads are running (")[2]
    assert re.search(r"[(,] ?busy[,)]", f"({said}"), caplog.text


def test_fork_early_runs_the_child_on_its_end_and_exits_with_what_it_did() -> None:
    def serve(theirs: socket.socket) -> None:
        theirs.send(theirs.recv(16).upper())

    def fail(theirs: socket.socket) -> None:
        raise RuntimeError("it failed")

    child = fork_early(serve, logging.getLogger("test"), "The child failed")
    child.sock.settimeout(DEADLINE)
    child.sock.send(b"hello")
    assert child.sock.recv(16) == b"HELLO"
    failing = fork_early(fail, logging.getLogger("test"), "The child failed")
    codes = asyncio.run(asyncio.wait_for(gather(child.wait(), failing.wait()), DEADLINE))
    assert codes == [0, 1]
    child.sock.close()
    failing.sock.close()


async def gather(*waits: Awaitable[int]) -> list[int]:
    return list(await asyncio.gather(*waits))
