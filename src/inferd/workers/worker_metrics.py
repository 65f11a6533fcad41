"""What one worker process's metrics and stream placement read: busy time, open streams.

Busy time is the time the worker had at least one request in flight (the
``worker_busy_seconds_total`` metric); open streams are the interleaved streams
(async generators, which hold no slot) started there and not finished, which
the pool places new ones by.
"""

from __future__ import annotations

import asyncio
import time


class WorkerMetrics:
    """Busy time and open interleaved streams of one worker process."""

    def __init__(self) -> None:
        self._busy_total = 0.0
        self._busy_since = 0.0
        self._busy = False
        self.open_streams = 0

    def busy_from_now(self) -> None:
        """Its first request in flight started."""
        self._busy = True
        self._busy_since = time.perf_counter()

    def idle_from_now(self) -> None:
        """Its last request in flight finished."""
        self._busy = False
        self._busy_total += time.perf_counter() - self._busy_since

    @property
    def busy_seconds(self) -> float:
        if self._busy:
            return self._busy_total + time.perf_counter() - self._busy_since
        return self._busy_total

    def stream_opened(self) -> None:
        self.open_streams += 1

    def stream_closed(self, _: asyncio.Future[None]) -> None:
        self.open_streams -= 1
