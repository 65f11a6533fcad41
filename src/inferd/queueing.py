"""The queue policy of one model version: priorities, bounds, deadlines, batch forming.

Pure logic with an injectable clock; the scheduler owns the asyncio side (futures,
timers, slots). Rules:

- Priority follows Triton: 1 is the highest level, larger numbers are lower, and
  0 (or no ``priority`` parameter) means the model's ``default_priority_level``.
  Requests leave by level, first in first out within a level.
- At most ``max_size`` requests wait (0: no bound); past that, :meth:`push`
  raises :class:`Overloaded` at once.
- A request whose deadline has passed is taken out by :meth:`pop_expired` and never
  reaches a batch.
- A batch is the first waiting request plus every later one that can be stacked
  with it (same :func:`~inferd.batching.batch_key`) while the total stays within
  ``max_batch_rows`` rows. A request larger than that runs alone.
- A batch goes out at once when the server is idle (nothing in flight) or when it
  is full; while other batches run, a partial batch waits for company until its
  oldest request has waited ``max_batch_time``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .batching import batch_key, batch_rows
from .errors import InvalidRequest, Overloaded
from .types import InferenceRequest

Clock = Callable[[], float]


@dataclass(slots=True, eq=False)
class Pending:
    """A waiting request and what the queue needs to know about it."""

    request: InferenceRequest
    rows: int | None  # None: cannot be stacked with others, runs alone
    key: Hashable
    priority: int
    arrived: float
    deadline: float | None
    waiter: Any = field(default=None)  # the scheduler's future for the request
    timer: Any = field(default=None)  # the scheduler's deadline timer


@dataclass(slots=True, frozen=True)
class QueuePolicy:
    max_batch_rows: int = 1  # 0 or 1: no batching
    max_batch_time: float = 0.0  # seconds
    max_size: int = 0  # 0: unbounded
    timeout: float | None = None  # seconds; None or 0: no deadline
    default_priority_level: int = 1

    @property
    def batching(self) -> bool:
        return self.max_batch_rows > 1


class RequestQueue:
    def __init__(
        self, policy: QueuePolicy, label: str = "the model", clock: Clock = time.monotonic
    ):
        self.policy = policy
        self._label = label
        self._clock = clock
        self._levels: dict[int, deque[Pending]] = {}
        self._size = 0
        self._with_deadline = 0

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Pending]:
        for level in sorted(self._levels):
            yield from self._levels[level]

    def pending(self, request: InferenceRequest) -> Pending:
        """Wrap a request for :meth:`push`; InvalidRequest for bad queue parameters."""
        now = self._clock()
        timeout = request_timeout(request, self.policy.timeout)
        rows = batch_rows(request) if self.policy.batching else None
        return Pending(
            request=request,
            rows=rows,
            key=batch_key(request) if rows is not None else None,
            priority=request_priority(request, self.policy.default_priority_level),
            arrived=now,
            deadline=now + timeout if timeout else None,
        )

    def push(self, pending: Pending) -> None:
        limit = self.policy.max_size
        if limit and self._size >= limit:
            raise Overloaded(
                f"The queue of {self._label} is full ({limit} requests waiting); retry later, "
                "or raise max_queue_size in its model-settings.json"
            )
        self._levels.setdefault(pending.priority, deque()).append(pending)
        self._size += 1
        if pending.deadline is not None:
            self._with_deadline += 1

    def remove(self, pending: Pending) -> bool:
        """Take a request out (its client went away); False if it was not waiting."""
        level = self._levels.get(pending.priority)
        if level is None:
            return False
        try:
            level.remove(pending)
        except ValueError:
            return False
        self._forget(pending)
        return True

    def pop_expired(self) -> list[Pending]:
        """Take out every request whose deadline has passed."""
        if not self._with_deadline:
            return []
        now = self._clock()
        expired = [p for p in self if p.deadline is not None and p.deadline <= now]
        for pending in expired:
            self.remove(pending)
        return expired

    def next_batch(self, in_flight: int) -> list[Pending]:
        """The requests to send now as one batch; empty if none should go yet."""
        if not self._size:
            return []
        head = next(iter(self))
        batch = self._gather(head)
        if self._should_hold(batch, in_flight):
            return []
        for pending in batch:
            self._levels[pending.priority].remove(pending)
            self._forget(pending)
        return batch

    def hold_until(self) -> float | None:
        """When the first request stops waiting for company (clock time), if batching."""
        if not self._size or not self.policy.batching:
            return None
        return next(iter(self)).arrived + self.policy.max_batch_time

    def _gather(self, head: Pending) -> list[Pending]:
        limit = self.policy.max_batch_rows
        if head.rows is None or not self.policy.batching or head.rows >= limit:
            return [head]
        batch, rows = [head], head.rows
        for pending in self:
            if rows >= limit:
                break
            if pending is head or pending.key != head.key or pending.rows is None:
                continue
            if rows + pending.rows <= limit:
                batch.append(pending)
                rows += pending.rows
        return batch

    def _should_hold(self, batch: list[Pending], in_flight: int) -> bool:
        if not in_flight or not self.policy.batching:
            return False
        rows = sum(pending.rows or 0 for pending in batch)
        if batch[0].rows is None or rows >= self.policy.max_batch_rows:
            return False
        oldest = min(pending.arrived for pending in batch)
        return self._clock() < oldest + self.policy.max_batch_time

    def _forget(self, pending: Pending) -> None:
        self._size -= 1
        if pending.deadline is not None:
            self._with_deadline -= 1
        if not self._levels[pending.priority]:
            del self._levels[pending.priority]


def request_priority(request: InferenceRequest, default_level: int) -> int:
    """The request's priority level (Triton's: 1 highest; 0 or none: the default)."""
    value = request.parameters.get("priority")
    if value is None:
        return default_level
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest(
            f"The request parameter 'priority' must be a whole number >= 0 "
            f"(1 is the highest level, 0 the default), not {value!r}"
        )
    return value or default_level


def request_timeout(request: InferenceRequest, default: float | None) -> float | None:
    """Seconds the request may wait in the queue. Its ``timeout`` parameter is in
    microseconds, as in Triton, and replaces the model's default; 0 means none."""
    value = request.parameters.get("timeout")
    if value is None:
        return default or None
    valid_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not valid_number or not math.isfinite(value) or value < 0:  # NaN is not < 0
        raise InvalidRequest(
            f"The request parameter 'timeout' must be a number of microseconds >= 0 "
            f"(0: no timeout), not {value!r}"
        )
    return value / 1e6 or None
