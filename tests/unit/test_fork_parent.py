"""The main process's books of the workers its fork parents fork (no processes)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from inferd.settings import ModelSettings, ServerSettings
from inferd.workers import forkserver
from inferd.workers.fork_parent import ForkParent

pytestmark = pytest.mark.anyio


async def test_a_worker_that_exits_as_soon_as_it_is_forked_still_reports_its_exit() -> None:
    # FORKED and EXITED can be read in one pass over the socket, before the forking
    # call resumes: the exit must not be lost, or reaping the worker never ends.
    parent = ForkParent(ServerSettings(), ModelSettings(name="m"), None)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    worker_ours, worker_theirs = socket.socketpair()
    parent._sock = ours
    try:
        forking = asyncio.ensure_future(parent.fork(worker_theirs))
        while not parent._forks:  # the FORK command is sent
            await asyncio.sleep(0)
        token = next(iter(parent._forks))
        parent._received((forkserver.FORKED, token, 4242))
        parent._received((forkserver.EXITED, 4242, 3))
        child = await forking
        assert child.poll() == 3
    finally:
        for sock in (ours, theirs, worker_ours, worker_theirs):
            sock.close()
