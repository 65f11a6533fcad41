"""Waiting for a condition, the one way every test tier (and the benchmarks) does it.

Poll, never sleep-and-hope: ``wait_for`` checks ``condition`` every ``interval``
seconds until it returns something truthy, and returns that; past ``timeout`` it
raises TimeoutError saying what it waited for. ``wait_for_async`` is the same for a
test running on an event loop: it sleeps with ``asyncio.sleep`` so the loop goes on
serving what the test waits for, and its condition may be a coroutine function. A
condition may raise to stop the wait at once (a server process that exited will
never become ready). Standard library only, like serverproc.py.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
# What a wait is for, or a function that says it when the wait fails (a server's log).
What = str | Callable[[], str]


def wait_for(
    condition: Callable[[], T], what: What, timeout: float = 30.0, interval: float = 0.02
) -> T:
    """``condition()``'s first truthy value; TimeoutError after ``timeout`` seconds."""
    deadline = _Deadline(what, timeout)
    while not (result := condition()):
        deadline.check()
        time.sleep(interval)
    return result


async def wait_for_async(
    condition: Callable[[], T | Awaitable[T]],
    what: What,
    timeout: float = 10.0,
    interval: float = 0.005,
) -> T:
    """:func:`wait_for` on an event loop: the loop runs between the checks, and the
    condition may be a coroutine function (one that sends a request, say)."""
    deadline = _Deadline(what, timeout)
    while not (result := await _value(condition())):
        deadline.check()
        await asyncio.sleep(interval)
    return result


async def _value(outcome: T | Awaitable[T]) -> T:
    return await outcome if inspect.isawaitable(outcome) else outcome


class _Deadline:
    def __init__(self, what: What, timeout: float) -> None:
        self.what, self.timeout = what, timeout
        self.at = time.monotonic() + timeout

    def check(self) -> None:
        """Raise TimeoutError, saying what was waited for, once the time is up."""
        if time.monotonic() >= self.at:
            what = self.what() if callable(self.what) else self.what
            raise TimeoutError(f"Timed out after {self.timeout}s waiting for {what}")
