"""Processes forked by a fork parent that outlive it: adopted by the process above it.

A fork parent (a model's, workers/forkserver.py; the protocol processes',
supervisor/protocol_parent.py) holds what its children share, so it must not be a
single point of failure: its death must not take its children. So it does not keep
them: :func:`fork_adopted` forks through a middle process that exits at once, and
the kernel gives the orphan to the nearest ancestor that declared itself a
subreaper (:func:`become_subreaper`, ``PR_SET_CHILD_SUBREAPER``): the process that
asked for the fork (the supervisor, or the main process of a model's workers). That
process reaps it itself (:class:`AdoptedChild`), the child dies with it
(``PR_SET_PDEATHSIG`` armed once adopted), and the parent's death is only the loss
of the next forks, while a new parent is made (Linux only, as the fork parents are).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time

from inferd.workers.worker import die_with_parent

PR_SET_NAME = 15  # prctl's option naming the calling thread (the process's comm)
PR_SET_CHILD_SUBREAPER = 36
# How often a child waits for its adoption (the middle process exits right after the fork).
ADOPTION_POLL_SECONDS = 0.0002
# How often an adopted child is polled for its exit where no pidfd can be had.
EXIT_POLL_SECONDS = 0.05
# A child whose exit was taken by someone else: its status is unknown (asyncio's choice).
UNKNOWN_EXIT = 255


def _prctl(option: int, value: int | bytes) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0


def become_subreaper() -> bool:
    """Make this process adopt its descendants' orphans (idempotent); whether it does."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def name_process(name: str) -> None:
    """Name this process (its main thread) as ps and /proc/PID/comm show it (Linux; at
    most 15 bytes are kept): a forked process's command line is its parent's."""
    _prctl(PR_SET_NAME, name.encode()[:15])


def fork_adopted(adopter: int) -> int:
    """Fork a child that ``adopter`` (this process's parent, a subreaper) adopts at once:
    0 in the child, adopted and dying with ``adopter``; the child's pid here, once it is
    adopted. OSError when it cannot fork."""
    read, write = os.pipe()
    try:
        middle = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        raise
    if middle == 0:
        os.close(read)
        _fork_and_leave(adopter, write)
        return 0  # the adopted child: the middle process never returns
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(middle, 0)  # gone: its child is the adopter's now
    if not answer:
        raise OSError("fork failed in the middle process")
    return int(answer)


def _fork_and_leave(adopter: int, write: int) -> None:
    """In the middle process: fork the child, say its pid, exit (in the child: return,
    once adopted)."""
    middle = os.getpid()  # not the child's getppid(): the middle may be gone by then
    try:
        pid = os.fork()
    except OSError:
        os._exit(1)
    if pid:
        os.write(write, str(pid).encode())
        os._exit(0)
    os.close(write)
    while os.getppid() == middle:  # until the middle process has exited
        time.sleep(ADOPTION_POLL_SECONDS)
    die_with_parent(adopter)  # exits at once if the adopter is not its parent


class AdoptedChild:
    """A child :func:`fork_adopted` gave this process: waited for and reaped here, as
    ``Popen`` (``poll``, ``kill``) and asyncio's ``Process`` (``wait``,
    ``send_signal``) are."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited: asyncio.Future[int] | None = None

    def poll(self) -> int | None:
        """Its exit code (minus the signal that killed it) once it has exited; None
        while it runs."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, UNKNOWN_EXIT << 8
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    async def wait(self) -> int:
        if self._exited is None:
            self._exited = asyncio.ensure_future(self._wait())
        return await asyncio.shield(self._exited)

    async def _wait(self) -> int:
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:  # gone already (then reaped below), or no pidfd here
            pidfd = -1
        try:
            while (returncode := self.poll()) is None:
                if pidfd < 0:
                    await asyncio.sleep(EXIT_POLL_SECONDS)
                    continue
                loop = asyncio.get_running_loop()
                readable = loop.create_future()
                loop.add_reader(pidfd, _settle, readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(pidfd)
            return returncode
        finally:
            if pidfd >= 0:
                os.close(pidfd)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # reaped: its pid may be someone else's by now
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _settle(readable: asyncio.Future[None]) -> None:
    if not readable.done():  # readable until read: the callback may come twice
        readable.set_result(None)
