"""The main process's books of the workers its fork parents fork, and the fork parent's
reading of its commands (no processes)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from inferd.errors import ModelError, WorkerLost
from inferd.settings import ModelSettings, ServerSettings
from inferd.workers import ipc, packets
from inferd.workers.fork_parent import ForkParent
from inferd.workers.forkserver import ForkServer
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio


class _Answering:
    """Stands in for the fork parent's process: each spawn opens a socket pair, and
    each LoadModel is answered with the next of ``answers`` (LoadFailed or Loaded)."""

    def __init__(self, parent: ForkParent, answers: list[packets.Message]) -> None:
        self.parent = parent
        self.answers = answers
        self.spawns = 0
        self.sockets: list[socket.socket] = []

    def spawn(self) -> None:
        self.spawns += 1
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sockets += [ours, theirs]
        self.parent._sock = ours
        answer = self.answers.pop(0)
        asyncio.get_running_loop().call_soon(self.parent._received, answer)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


async def test_a_fork_parent_that_fails_to_start_again_is_tried_again_at_the_next_fork() -> None:
    # A dead parent is started again at the next fork; if that load fails (a weight
    # store briefly down), the worker's restart must fail as WorkerLost (the pool
    # backs off and tries again), and the next try must start a parent again.
    parent = ForkParent(ServerSettings(), ModelSettings(name="m"), None)
    failed = packets.LoadFailed(ipc.error_to_wire(ModelError("weights unreachable")))
    fake = _Answering(parent, [failed, packets.Loaded(4000)])
    parent._spawn = fake.spawn  # type: ignore[method-assign]
    worker_ours, worker_theirs = socket.socketpair()
    try:
        with pytest.raises(WorkerLost, match="weights unreachable"):
            await parent.fork(worker_theirs)
        forking = asyncio.ensure_future(parent.fork(worker_theirs))
        await wait_for_async(lambda: parent._forks, "a new parent, then its ForkWorker command")
        parent._received(packets.Forked(next(iter(parent._forks)), 4243))
        assert (await forking).pid == 4243
        assert fake.spawns == 2
    finally:
        parent._sock = None
        fake.close()
        worker_ours.close()
        worker_theirs.close()


def test_a_fork_parent_reads_on_past_an_unreadable_command_and_stops_at_the_close() -> None:
    # A packet that is no message must not end the parent (nor fork anything): the
    # next command is still answered, and the end of its socket ends its loop.
    main, control = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    worker_ours, worker_theirs = socket.socketpair()
    try:
        main.send(b"not a frame")
        packets.send(main, packets.ForkWorker(3), worker_theirs.fileno())
        main.shutdown(socket.SHUT_WR)
        ForkServer(control, adopter=0).serve()  # no model loaded: it must not fork
        answer = packets.receive(main)
        assert answer is not None
        # Why it did not fork depends on this test process too (threads that earlier
        # tests left running are checked first): the command was answered, refused.
        (refused, _) = answer
        assert isinstance(refused, packets.ForkFailed) and refused.token == 3, refused
    finally:
        for sock in (main, control, worker_ours, worker_theirs):
            sock.close()
