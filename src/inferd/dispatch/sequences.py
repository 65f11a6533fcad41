"""The open sequences of one model version (Triton's sequence batching): pure logic.

A model whose settings have a ``sequence_batching`` block serves stateful
requests. Each request names its sequence with Triton's parameters:
``sequence_id`` (a whole number from 1 to 2**64-1, or a non-empty string: 0 and
"" mean none), ``sequence_start`` and ``sequence_end`` (booleans). Rules, as
Triton's (with two stricter ones, marked):

- A request without a sequence id is refused (400).
- ``sequence_start`` opens a sequence and places it on one holder (a worker
  process); its later requests all run there. Starting a sequence that is still
  open is refused (400; Triton only warns).
- A request of a sequence that is not open (never started, ended, expired, or
  lost with its worker) is refused (400) with Triton's wording and the reason.
- The request with ``sequence_end`` closes it once it has run; requests sent for
  it after that one are refused (400, stricter than Triton).
- A sequence with no request queued or running for ``max_sequence_idle_microseconds``
  expires.

The table also counts, per sequence, its requests waiting and whether one runs, so
its dispatch policy (:mod:`inferd.dispatch.sequence_dispatch`) runs them one at a time, in order.
Tested with a fake clock, without an event loop.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

from inferd.errors import InvalidRequest
from inferd.workers.base import Holder, OnHolder, WorkerState

logger = logging.getLogger(__name__)

SequenceId = int | str
Clock = Callable[[], float]

MAX_SEQUENCE_ID = 2**64 - 1
# Closed sequences whose reason a late request still gets (older ones: "not open").
REMEMBERED = 4096


def warn_unrouted(label: str) -> bool:
    """Log that ``label``, which has no sequence batching, got a request naming a
    sequence: the pool keeps each sequence on the worker its id picks, but nothing
    else of sequence batching applies (one request of a sequence at a time, in order;
    idle expiry; the runtime's ``sequence_end``). True: logged."""
    logger.warning(
        "%s got a request with a sequence_id but has no sequence_batching: each "
        "sequence's requests go to one worker process, but with threads_per_worker > 1 "
        "they may run at the same time, and its runtime's sequence_end is never called. "
        'Give its model-settings.json "sequence_batching": {} to run each sequence\'s '
        "requests one at a time, in order (Triton's sequence batcher)",
        label[0].upper() + label[1:],
    )
    return True


@dataclass(frozen=True, slots=True)
class EndSequence:
    """Have the runtime on ``holder`` drop the sequence's state (its ``sequence_end``),
    after what was sent there before; a holder that stopped took it along. A control
    message (workers.base.Control), pickled to the worker keeping the state."""

    instance_id: int
    holder: Holder
    sequence_id: SequenceId

    def destination(self) -> OnHolder:
        return OnHolder(self.instance_id, self.holder)

    def apply_in_worker(self, worker: WorkerState) -> None:
        loaded = worker.loaded(self.instance_id)
        if loaded is not None:  # unloaded: its state is gone already
            loaded.end_sequence(self.sequence_id)


@dataclass(frozen=True, slots=True)
class SequenceControl:
    """A request's sequence parameters."""

    sequence_id: SequenceId
    start: bool
    end: bool


def sequence_control(parameters: Mapping[str, Any], model: str) -> SequenceControl:
    """The request's sequence parameters; InvalidRequest if it has none or bad ones."""
    value = parameters.get("sequence_id")
    if value is None or value == 0 or value == "":  # Triton: 0 and "" are "no sequence"
        raise InvalidRequest(
            f"inference request to model '{model}' must specify a non-zero or non-empty "
            "correlation ID: the model uses sequence batching, so every request needs the "
            "parameters sequence_id, sequence_start and sequence_end"
        )
    is_number = isinstance(value, int) and not isinstance(value, bool)
    if not (isinstance(value, str) or (is_number and 0 < value <= MAX_SEQUENCE_ID)):
        raise InvalidRequest(
            "The request parameter 'sequence_id' must be a whole number from 1 to 2**64-1 "
            f"or a non-empty string, not {value!r}"
        )
    return SequenceControl(
        value, _flag(parameters, "sequence_start"), _flag(parameters, "sequence_end")
    )


def _flag(parameters: Mapping[str, Any], name: str) -> bool:
    value = parameters.get(name, False)
    if not isinstance(value, bool):
        raise InvalidRequest(f"The request parameter {name!r} must be true or false, not {value!r}")
    return value


@dataclass(slots=True, eq=False)
class Sequence:
    """One open sequence: where it runs and what of it is waiting or running."""

    sequence_id: SequenceId
    holder: Holder  # the worker (the pool's holder key) that keeps its state
    last_active: float  # when a request of it last arrived or finished
    waiting: int = 0  # requests of it admitted and not started yet
    busy: bool = False  # one of its requests runs now
    ending: bool = False  # its request with sequence_end was admitted
    ran: bool = False  # one of its requests has started

    @property
    def idle(self) -> bool:
        return not self.busy and not self.waiting


class SequenceTable:
    """The open sequences of one model version, by id."""

    def __init__(
        self,
        model: str,
        idle_timeout: float,
        clock: Clock = time.monotonic,
        remembered: int = REMEMBERED,
    ) -> None:
        self._model = model
        self.idle_timeout = idle_timeout
        self._clock = clock
        self._open: dict[SequenceId, Sequence] = {}
        self._per_holder: dict[Holder, int] = {}
        # Why recently closed sequences are closed, for a request that comes late.
        self._closed: OrderedDict[SequenceId, str] = OrderedDict()
        self._remembered = remembered

    def __len__(self) -> int:
        return len(self._open)

    def get(self, sequence_id: SequenceId) -> Sequence | None:
        return self._open.get(sequence_id)

    def open_on(self, holder: Holder) -> int:
        """How many open sequences ``holder`` keeps."""
        return self._per_holder.get(holder, 0)

    def admit(self, control: SequenceControl, place: Callable[[], Holder]) -> Sequence:
        """Count one more request of the sequence, opening it if the request starts it
        (``place()`` picks its holder); InvalidRequest if the request is not valid now."""
        sequence_id = control.sequence_id
        sequence = self._open.get(sequence_id)
        now = self._clock()
        if control.start:
            if sequence is not None:
                raise InvalidRequest(
                    f"inference request for sequence {sequence_id} to model '{self._model}' "
                    "has the START flag, but that sequence is already open; end it first "
                    "(sequence_end) or use another sequence_id"
                )
            sequence = Sequence(sequence_id, place(), now)
            self._open[sequence_id] = sequence
            self._per_holder[sequence.holder] = self.open_on(sequence.holder) + 1
            self._closed.pop(sequence_id, None)
        elif sequence is None:
            raise InvalidRequest(self._not_open(sequence_id))
        elif sequence.ending:
            raise InvalidRequest(
                f"inference request for sequence {sequence_id} to model '{self._model}' "
                "came after the request that ends it (sequence_end); start a new sequence"
            )
        sequence.waiting += 1
        sequence.last_active = now
        sequence.ending = control.end
        return sequence

    def _not_open(self, sequence_id: SequenceId) -> str:
        reason = self._closed.get(sequence_id, f"sequence {sequence_id} is not open")
        return (
            f"inference request for sequence {sequence_id} to model '{self._model}' must "
            f"specify the START flag on the first request of the sequence ({reason})"
        )

    def started(self, sequence: Sequence) -> None:
        """One of its waiting requests starts running."""
        sequence.waiting -= 1
        sequence.busy = sequence.ran = True

    def withdrawn(self, sequence: Sequence, ends: bool) -> None:
        """A waiting request of it left unrun (its client went away). A sequence none
        of whose requests ever ran is forgotten with its last one, as if never started
        (its client may start it again); else it stays open, and expires if idle."""
        sequence.waiting -= 1
        sequence.last_active = self._clock()
        if ends:
            sequence.ending = False
        if not sequence.ran and sequence.idle and self._open.get(sequence.sequence_id) is sequence:
            self._close(sequence, f"sequence {sequence.sequence_id} is not open")

    def finished(self, sequence: Sequence) -> bool:
        """Its running request is done; True if that closed the sequence (it ended)."""
        sequence.busy = False
        sequence.last_active = self._clock()
        if sequence.ending and sequence.idle and self._open.get(sequence.sequence_id) is sequence:
            self._close(sequence, f"sequence {sequence.sequence_id} has ended")
            return True
        return False

    def next_expiry(self) -> float | None:
        """When the first idle sequence expires if nothing comes for it (None: none is idle)."""
        idle = [s.last_active for s in self._open.values() if s.idle]
        return min(idle) + self.idle_timeout if idle else None

    def expire(self) -> list[Sequence]:
        """Close and return every sequence idle for ``idle_timeout`` or longer."""
        due = self._clock() - self.idle_timeout
        expired = [s for s in self._open.values() if s.idle and s.last_active <= due]
        microseconds = round(self.idle_timeout * 1e6)
        for sequence in expired:
            reason = (
                f"sequence {sequence.sequence_id} expired: no request came for it in "
                f"max_sequence_idle_microseconds ({microseconds})"
            )
            self._close(sequence, reason)
        return expired

    def lose(self, alive: Container[Holder], why: str) -> list[Sequence]:
        """Close and return the sequences whose holder is not in ``alive`` (it died)."""
        lost = [s for s in self._open.values() if s.holder not in alive]
        for sequence in lost:
            self.drop(sequence, why)
        return lost

    def drop(self, sequence: Sequence, why: str) -> None:
        """Close the sequence because ``why`` (a sentence about its holder), if still open."""
        if self._open.get(sequence.sequence_id) is sequence:
            self._close(sequence, f"sequence {sequence.sequence_id} was lost: {why}")

    def close_all(self) -> list[Sequence]:
        closed = list(self._open.values())
        for sequence in closed:
            self._close(
                sequence, f"sequence {sequence.sequence_id} was closed: the model was unloaded"
            )
        return closed

    def _close(self, sequence: Sequence, reason: str) -> None:
        del self._open[sequence.sequence_id]
        holder = sequence.holder
        remaining = self._per_holder[holder] - 1
        if remaining:
            self._per_holder[holder] = remaining
        else:
            del self._per_holder[holder]
        self._closed[sequence.sequence_id] = reason
        self._closed.move_to_end(sequence.sequence_id)
        while len(self._closed) > self._remembered:
            self._closed.popitem(last=False)
