"""The credit pump of a stream run for another process, on an event loop.

A stream that the model host runs for a protocol process (``host/streams.py``
``HostStream``) and an async generator's stream in a worker
(``workers/worker_streams.py``) send their responses to the process that asked for
them while the stream holds credit (see :mod:`inferd.workers.remote_stream` for the
window): it starts with the window the client gave, each response sent spends one,
a ``Credit`` grant adds some; with none left the pump waits for a grant before it
reads on, so a slow reader pauses the model's generator. A list of responses ready
together is sent whole, so the credit may go below zero by those that came with the
last one it covered. ``Cancel`` stops the pump: at once when it waits for credit,
and, where the stream asks (``interruptible``), while it awaits the next responses
(the task gets CancelledError there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class CreditPump(Generic[Item]):
    """One stream's credit and its pump; touched on its event loop only."""

    __slots__ = ("_more", "_pulling", "cancelled", "credit")

    def __init__(self, credit: int) -> None:
        self.credit = credit
        self.cancelled = False  # Cancel came: the pump stops
        self._more: asyncio.Future[None] | None = None  # the pump waits for credit
        self._pulling: asyncio.Task[object] | None = None  # set while it awaits ``pull``

    def grant(self, credit: int) -> None:
        self.credit += credit
        self._wake()

    def stop(self) -> bool:
        """Stop the pump (False if it was stopped already): its task is cancelled too
        if the pump is interruptible and awaits the next responses now; anywhere else
        (including before it first ran) the pump sees the flag."""
        if self.cancelled:
            return False
        self.cancelled = True
        if self._pulling is not None:
            self._pulling.cancel()
        self._wake()
        return True

    def _wake(self) -> None:
        more = self._more
        if more is not None and not more.done():
            more.set_result(None)

    async def pump(
        self,
        pull: Callable[[], Awaitable[list[Item]]],
        send: Callable[[list[Item]], None],
        interruptible: bool,
    ) -> None:
        """``send`` each list ``pull`` gives while there is credit, until ``pull``
        raises StopAsyncIteration or the pump is stopped. ``interruptible``: a stop
        cancels this task where it awaits ``pull`` (the generator gets
        CancelledError there)."""
        # Asked once, not per response: each ask costs ~1 us on Python 3.11.
        loop = asyncio.get_running_loop()
        task = asyncio.current_task() if interruptible else None
        while not self.cancelled:
            if self.credit <= 0:
                self._more = loop.create_future()
                try:
                    await self._more
                finally:
                    self._more = None
                continue
            self._pulling = task
            try:
                ready = await pull()
            except StopAsyncIteration:
                return
            finally:
                self._pulling = None
            self.credit -= len(ready)
            send(ready)
