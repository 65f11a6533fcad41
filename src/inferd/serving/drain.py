"""Which inference calls the server still takes, and how those it took end at shutdown.

The DataPlane admits every inference call (unary or stream) through one
:class:`Drain`. While the server serves, admitting is a set insertion. Once it
starts to shut down (:meth:`Drain.close`), new calls are refused with
:class:`~inferd.errors.ShuttingDown` (503 / UNAVAILABLE) and those admitted run
on. At the shutdown deadline :meth:`Drain.cut` stops each call still running: it
fails with ShuttingDown where it waits, so its client gets an answer saying why
(a 503, a last SSE ``event: error``, a stream's ``error_message``) instead of a
dropped connection.

A call is stopped by cancelling the task that awaits it, and only while that task
awaits the call's own answer: a stream between two responses is in its reader's
hands (sending the last response to a client), so it is only marked, and fails
when its reader comes back for the next response.
"""

from __future__ import annotations

import asyncio

from inferd.errors import ShuttingDown

REFUSED = (
    "The server is shutting down and takes no new requests; send the request to another replica"
)
STOPPED = (
    "The server is shutting down and stopped this request before it finished; "
    "send it again to another replica"
)


class OpenStream:
    """One admitted stream: the task reading it, and whether it waits for a response."""

    __slots__ = ("cut", "task", "waiting")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        # True while its reader awaits the next response (where a cut may cancel it).
        self.waiting = False
        # Set by the cut while its reader was elsewhere: it fails on its next response.
        self.cut = False


class Drain:
    """The inference calls in flight, and whether new ones are taken."""

    def __init__(self) -> None:
        self.closed = False
        # Tasks awaiting a unary call: each is inside the call for as long as it is here.
        self._calls: set[asyncio.Task[object]] = set()
        self._streams: set[OpenStream] = set()
        # Tasks the cut cancelled, whose cancellation becomes ShuttingDown.
        self._cancelled: set[asyncio.Task[object]] = set()
        # The loop the calls run on: asking for its current task skips looking it up.
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def calls(self) -> int:
        """Unary calls in flight (queued or running)."""
        return len(self._calls)

    @property
    def streams(self) -> int:
        """Streams open."""
        return len(self._streams)

    def close(self) -> None:
        """Refuse new calls from now on; those in flight go on."""
        self.closed = True

    def admit(self) -> asyncio.Task[object]:
        """Admit a unary call run by the current task; ShuttingDown once closed."""
        if self.closed:
            raise ShuttingDown(REFUSED)
        task = self._current_task()
        self._calls.add(task)
        return task

    def leave(self, task: asyncio.Task[object]) -> None:
        self._calls.discard(task)
        self._cancelled.discard(task)

    def open_stream(self) -> OpenStream:
        """Admit a stream read by the current task; ShuttingDown once closed."""
        if self.closed:
            raise ShuttingDown(REFUSED)
        stream = OpenStream(self._current_task())
        self._streams.add(stream)
        return stream

    def close_stream(self, stream: OpenStream) -> None:
        self._streams.discard(stream)
        self._cancelled.discard(stream.task)

    def stopped(self, task: asyncio.Task[object]) -> ShuttingDown | None:
        """The error to raise instead of the CancelledError ``task`` got, if the cut
        cancelled it (its cancellation is then undone); None for any other cancel."""
        if task not in self._cancelled:
            return None
        self._cancelled.discard(task)
        task.uncancel()
        return ShuttingDown(STOPPED)

    def cut(self) -> tuple[int, int]:
        """Stop every call still in flight; how many (unary calls, streams) were."""
        self.closed = True
        for task in self._calls:
            self._cancel(task)
        for stream in self._streams:
            if stream.waiting:
                self._cancel(stream.task)
            else:
                stream.cut = True
        return len(self._calls), len(self._streams)

    def _cancel(self, task: asyncio.Task[object]) -> None:
        if task not in self._cancelled and task.cancel():
            self._cancelled.add(task)

    def _current_task(self) -> asyncio.Task[object]:
        """The task running now (half the cost of asyncio.current_task() on 3.11)."""
        task = asyncio.current_task(self._loop) if self._loop is not None else None
        if task is None:  # the first call, or one on another loop (tests)
            self._loop = asyncio.get_running_loop()
            task = asyncio.current_task(self._loop)
        assert task is not None  # inference calls run in tasks (servers' handlers)
        return task
