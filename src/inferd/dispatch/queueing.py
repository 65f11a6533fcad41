"""The queue of one model version: priorities, bounds, deadlines, batch forming.

Pure logic with an injectable clock; the scheduler owns the asyncio side (futures,
timers, slots). Rules:

- Priority follows Triton: 1 is the highest level, larger numbers are lower, and
  0 (or no ``priority`` parameter) means the model's ``default_priority_level``.
  Requests leave by level, first in first out within a level.
- At most ``max_size`` requests wait (0: no bound); past that, :meth:`push`
  raises :class:`Overloaded` at once. The bound is the version's own
  ``max_queue_size``, or the server's when its model-settings.json sets none.
- A request whose deadline has passed is taken out by :meth:`pop_expired` and never
  reaches a batch.
- Which requests leave together, and when, is the version's
  :class:`~inferd.dispatch.batch_policy.BatchPolicy`'s call.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferd.errors import DeadlineExceeded, InvalidRequest, Overloaded
from inferd.types import InferenceRequest

if TYPE_CHECKING:  # batch_policy imports Pending from here
    from inferd.dispatch.batch_policy import BatchPolicy
    from inferd.settings import ModelSettings

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
    streams: bool = False  # a predict_stream call: never stacked, holds its slot to the end
    waiter: Any = field(default=None)  # the scheduler's future for the request
    timer: Any = field(default=None)  # the scheduler's deadline timer
    trace: Any = field(default=None)  # the request's RequestTrace, if it is traced


MODEL_SETTINGS_BOUND = "its model-settings.json"
SERVER_SETTINGS_BOUND = "settings.json (for every model)"


@dataclass(slots=True, frozen=True)
class QueuePolicy:
    max_size: int = 0  # 0: unbounded
    timeout: float | None = None  # seconds; None or 0: no deadline
    default_priority_level: int = 1
    bound_set_in: str = MODEL_SETTINGS_BOUND  # where max_size comes from, for the error

    @classmethod
    def of(cls, settings: ModelSettings | None, server_max_size: int = 0) -> QueuePolicy:
        """The policy a model version's settings ask for (defaults without any);
        ``server_max_size`` is the server's bound, for versions that set none."""
        own_bound = settings.max_queue_size if settings is not None else None
        max_size, bound_set_in = queue_bound(own_bound, server_max_size)
        if settings is None:
            return cls(max_size=max_size, bound_set_in=bound_set_in)
        return cls(
            max_size=max_size,
            timeout=settings.timeout or None,
            default_priority_level=settings.default_priority_level,
            bound_set_in=bound_set_in,
        )


def queue_bound(model_max_size: int | None, server_max_size: int) -> tuple[int, str]:
    """A version's queue bound (0: none) and where it is set: the version's own
    ``max_queue_size`` when it sets one, 0 included, else the server's."""
    if model_max_size is None:
        return server_max_size, SERVER_SETTINGS_BOUND
    return model_max_size, MODEL_SETTINGS_BOUND


# The requests to send now (empty: none yet), and until when a held batch may wait.
Batch = tuple[list[Pending], float | None]


class RequestQueue:
    def __init__(
        self,
        policy: QueuePolicy,
        batch_policy: BatchPolicy,
        label: str = "the model",
        clock: Clock = time.monotonic,
    ):
        self.policy = policy
        self.batch_policy = batch_policy
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

    def pending(self, request: InferenceRequest, streams: bool = False) -> Pending:
        """Wrap a request for :meth:`push`; InvalidRequest for bad queue parameters."""
        now = self._clock()
        timeout = request_timeout(request, self.policy.timeout)
        rows, key = (None, None) if streams else self.batch_policy.describe(request)
        return Pending(
            streams=streams,
            request=request,
            rows=rows,
            key=key,
            priority=request_priority(request, self.policy.default_priority_level),
            arrived=now,
            deadline=now + timeout if timeout else None,
        )

    def push(self, pending: Pending) -> None:
        limit = self.policy.max_size
        if limit and self._size >= limit:
            raise Overloaded(
                f"The queue of {self._label} is full ({limit} requests waiting); retry later, "
                f"or raise max_queue_size in {self.policy.bound_set_in}"
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

    def next_batch(self, in_flight: int) -> Batch:
        """The requests to send now as one batch, taken out of the queue; none while
        the batch policy holds them (with the time it holds them until)."""
        if not self._size:
            return [], None
        head = next(iter(self))
        batch = self.batch_policy.gather(head, self)
        due = self.batch_policy.hold(batch, in_flight)
        if due is not None:
            return [], due
        for pending in batch:
            self._levels[pending.priority].remove(pending)
            self._forget(pending)
        return batch, None

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


def deadline_error(pending: Pending, now: float) -> DeadlineExceeded:
    """What a request that waited past its deadline is answered with."""
    waited = now - pending.arrived
    return DeadlineExceeded(
        f"The request waited {waited:.3f}s in the queue, past its timeout, and was not run; "
        "retry later, or raise its 'timeout' parameter (microseconds) or the model's timeout"
    )
