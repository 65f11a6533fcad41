"""Which model calls ran past their ``inference_timeout``, with one timer for them all.

Each call of a model with a limit is noted when it is sent to a worker and
forgotten when it is answered. One timer, set at the deadline of the oldest call
noted, finds those past their deadline; the pool then answers each with 504 and
kills the worker running it.

One timer, not one per call, because that is the cheaper way: a call costs a
clock read and a dict insert and delete, where a timer of its own would cost a
timer handle, a push onto the event loop's heap and a cancel (the cancelled
handle staying in the heap until it would have fired). All calls of one model
share its limit, so the oldest of them is the first noted (dicts keep insertion
order) and finding who ran too long never scans the calls still in time. A call
answered before its deadline leaves the timer alone: when the timer fires it
looks at who is oldest then and sets itself at that call's deadline, so while
calls flow it fires about once per limit, not once per call.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

Call = TypeVar("Call", bound=Hashable)

# Timers may fire a hair early (uvloop's run at millisecond resolution): a call this
# close to its deadline counts as past it, so the timer is not set again for nothing.
EARLY_FIRING = 0.002


class Cancellable(Protocol):
    def cancel(self) -> None: ...


# Calls ``callback`` after ``delay`` seconds (the event loop's call_later).
Schedule = Callable[[float, Callable[[], None]], Cancellable]


class _Running(Generic[Call]):
    """The calls of one model instance in flight, each with when it was sent, oldest first."""

    __slots__ = ("calls", "limit")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.calls: dict[Call, float] = {}


class InferenceTimer(Generic[Call]):
    """Calls ``on_overrun(call)`` for each call still running ``limit`` seconds after
    :meth:`started` and not :meth:`finished` by then."""

    def __init__(
        self,
        on_overrun: Callable[[Call], None],
        clock: Callable[[], float] = time.monotonic,
        schedule: Schedule | None = None,  # None: the running event loop's call_later
    ) -> None:
        self._on_overrun = on_overrun
        self._clock = clock
        self._schedule = schedule
        self._running: dict[int, _Running[Call]] = {}
        self._timer: Cancellable | None = None
        self._timer_at = math.inf

    def started(self, call: Call, instance_id: int, limit: float) -> None:
        """``call`` of the instance was sent now; it may run ``limit`` seconds."""
        running = self._running.get(instance_id)
        if running is None:
            running = self._running[instance_id] = _Running(limit)
        now = self._clock()
        running.calls[call] = now
        if now + limit < self._timer_at:
            self._arm(now + limit, now)

    def finished(self, call: Call, instance_id: int) -> None:
        """``call`` was answered (or failed): it runs no more."""
        running = self._running.get(instance_id)
        if running is not None:
            running.calls.pop(call, None)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf
        self._running.clear()

    def _arm(self, deadline: float, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        schedule = self._schedule or asyncio.get_running_loop().call_later
        self._timer = schedule(max(0.0, deadline - now), self._check)
        self._timer_at = deadline

    def _check(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = self._clock()
        overran: list[Call] = []
        next_deadline = math.inf
        for instance_id, running in list(self._running.items()):
            calls = running.calls
            while calls:
                call, sent_at = next(iter(calls.items()))
                if sent_at + running.limit > now + EARLY_FIRING:
                    next_deadline = min(next_deadline, sent_at + running.limit)
                    break
                del calls[call]
                overran.append(call)
            if not calls:
                del self._running[instance_id]  # an idle model costs the timer nothing
        if next_deadline < math.inf:
            self._arm(next_deadline, now)
        for call in overran:  # last: what it does may start or finish calls
            self._on_overrun(call)
