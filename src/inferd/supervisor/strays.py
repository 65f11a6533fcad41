"""The orphans the supervisor adopts and did not start: reaped, so none stays a zombie.

The supervisor is a subreaper (workers/adoption.py: the protocol processes forked
by the protocol fork parent are its own children, so they outlive that parent).
So every orphan below it comes to it too: when a protocol process or the model host
dies, its workers and fork parents die with it (``PR_SET_PDEATHSIG``) as the
supervisor's children, and would stay zombies. :func:`reap_strays` reaps each
exited child that is not one of the supervisor's own (those are waited for by
whoever started them: asyncio, or an ``AdoptedChild``); the supervisor calls it
every :data:`SWEEP_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

SWEEP_SECONDS = 2.0


def reap_strays(own: Callable[[], set[int]]) -> int:
    """Reap exited children that are not ``own``; how many. Stops at the first exited
    child that is its starter's to reap (the next sweep goes on past it once reaped)."""
    reaped = 0
    while True:
        try:
            exited = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped  # no child at all
        if exited is None or exited.si_pid in own():
            return reaped
        with contextlib.suppress(ChildProcessError):
            os.waitpid(exited.si_pid, os.WNOHANG)
        reaped += 1


async def keep_reaping_strays(own: Callable[[], set[int]], stopping: asyncio.Event) -> None:
    """Sweep every :data:`SWEEP_SECONDS` until ``stopping``."""
    while not stopping.is_set():
        reap_strays(own)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), SWEEP_SECONDS)
