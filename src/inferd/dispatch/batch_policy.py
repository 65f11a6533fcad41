"""When a model version's queued requests run together: one policy object per version.

The queued dispatch (:mod:`inferd.dispatch.queued`) asks its batch policy three
things, and nothing else about batching:

- :meth:`~BatchPolicy.admit`: may a request that arrives now skip the queue and go
  straight to a free slot?
- :meth:`~BatchPolicy.gather`: which waiting requests go out with the one at the
  head of the queue?
- :meth:`~BatchPolicy.hold`: should that batch wait for company, and until when?

:class:`NoBatching` runs every request on its own; :class:`AdaptiveBatching`
(``max_batch_size`` > 1) stacks requests the model treats alike. A new way of
grouping queued requests is a new class with these methods; a way of dispatching
that does not queue this way (sequences) is a dispatch policy of its own
(:mod:`inferd.dispatch.policy`).
Pure logic with an injectable clock, tested without an event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, Protocol

from inferd.dispatch.batching import batch_key, batch_rows
from inferd.dispatch.queueing import Pending
from inferd.types import InferenceRequest

if TYPE_CHECKING:
    from inferd.settings import ModelSettings

Clock = Callable[[], float]


class BatchPolicy(Protocol):
    def describe(self, request: InferenceRequest) -> tuple[int | None, Hashable]:
        """The request's rows and batch key (rows None: it runs alone)."""
        ...

    def admit(self, in_flight: int, capacity: int, waiting: int) -> bool:
        """Whether a request arriving now goes straight to a slot, past the queue."""
        ...

    def gather(self, head: Pending, queue: Iterable[Pending]) -> list[Pending]:
        """``head`` and the requests of ``queue`` (in queue order) to send with it."""
        ...

    def hold(self, batch: list[Pending], in_flight: int) -> float | None:
        """Until when (clock time) ``batch`` waits for company; None: send it now."""
        ...


class NoBatching:
    """Each request runs alone, as soon as a slot is free."""

    def describe(self, request: InferenceRequest) -> tuple[int | None, Hashable]:
        return None, None

    def admit(self, in_flight: int, capacity: int, waiting: int) -> bool:
        return not waiting and in_flight < capacity

    def gather(self, head: Pending, queue: Iterable[Pending]) -> list[Pending]:
        return [head]

    def hold(self, batch: list[Pending], in_flight: int) -> float | None:
        return None


class AdaptiveBatching:
    """Stack alike requests up to ``max_rows`` rows.

    A batch goes out at once when nothing else of the model runs (a lone request
    never waits) or when it is full; while other batches run, a partial batch
    waits for company until its oldest request has waited ``max_time`` seconds.
    A request larger than ``max_rows`` runs alone.
    """

    def __init__(self, max_rows: int, max_time: float, clock: Clock = time.monotonic) -> None:
        self.max_rows = max_rows
        self.max_time = max_time
        self._clock = clock

    def describe(self, request: InferenceRequest) -> tuple[int | None, Hashable]:
        rows = batch_rows(request)
        return rows, (batch_key(request) if rows is not None else None)

    def admit(self, in_flight: int, capacity: int, waiting: int) -> bool:
        # While others run, a newcomer waits in the queue for company (if it may wait).
        return not waiting and in_flight < capacity and not (in_flight and self.max_time > 0)

    def gather(self, head: Pending, queue: Iterable[Pending]) -> list[Pending]:
        limit = self.max_rows
        if head.rows is None or head.rows >= limit:
            return [head]
        batch, rows = [head], head.rows
        for pending in queue:
            if rows >= limit:
                break
            if pending is head or pending.key != head.key or pending.rows is None:
                continue
            if rows + pending.rows <= limit:
                batch.append(pending)
                rows += pending.rows
        return batch

    def hold(self, batch: list[Pending], in_flight: int) -> float | None:
        if not in_flight or batch[0].rows is None:
            return None
        if sum(pending.rows or 0 for pending in batch) >= self.max_rows:
            return None
        due = min(pending.arrived for pending in batch) + self.max_time
        return due if self._clock() < due else None


def batch_policy_of(settings: ModelSettings | None) -> BatchPolicy:
    """The policy a model version's settings ask for: batching from max_batch_size 2."""
    if settings is None or settings.max_batch_size <= 1:
        return NoBatching()
    return AdaptiveBatching(settings.max_batch_size, settings.max_batch_time)
