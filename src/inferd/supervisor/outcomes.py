"""What one process did with one operation the coordinator sent it, as a type.

The coordinator sends an operation to each process's private ``rest-<i>.sock``
(fanout.py ``deliver``) and reads its HTTP answer once, here (:func:`outcome_of`),
into one of four outcomes, each carrying the :class:`Process` it came from:

- :class:`Applied`: the process applied it; ``value`` is what it answered (None,
  the log settings in force, its statistics, the regions its requests hold);
- :class:`Refused`: it refused it; ``refusal`` is the error as it raised it
  (serving/operations.py ``Refusal``: class, message, fields, REST status);
- :class:`NotHeld`: an unload or a statistics read of a model the process does
  not hold ("no such model"). The model host holds only the models no protocol
  process copies, so from it this is no refusal; from a protocol process it is
  one (merging.py ``settle`` decides which, knowing the process);
- :class:`NoAnswer`: nothing answered (its socket missing or refused: starting,
  restarting, gone); ``error`` says what the transport found.

Past this module nothing reads an HTTP status: settling (merging.py), the host's
order (host_order.py) and the journal work on these; the coordinator's app turns
the settled outcome back into the answer a forwarding process reads (coordinator.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from inferd.errors import StatusError
from inferd.serving.operations import (
    UNLOADS,
    Operation,
    ReadStatistics,
    Refusal,
    decode_refusal,
    decode_value,
    refusal_of,
)
from inferd.supervisor.fanout import Answer, deliver
from inferd.supervisor.paths import PrivatePaths

# A "no such model" answer: to an unload or a statistics read, the model is not held.
_NOT_FOUND = 404
_ABOUT_A_HELD_MODEL = (*UNLOADS, ReadStatistics)


@dataclass(frozen=True, order=True)
class Process:
    """One process the coordinator reaches: protocol process ``index``, or the model
    host (``is_host``: its index is the number of protocol processes, its socket
    ``rest-<N>.sock``). Ordered protocol processes first, by index, then the host."""

    is_host: bool
    index: int

    @classmethod
    def protocol(cls, index: int) -> Process:
        return cls(False, index)

    @classmethod
    def host(cls, index: int) -> Process:
        return cls(True, index)

    def __str__(self) -> str:
        return "The model host" if self.is_host else f"Protocol process {self.index}"


@dataclass(frozen=True)
class Applied:
    process: Process
    value: Any = None


@dataclass(frozen=True)
class Refused:
    process: Process
    refusal: Refusal


@dataclass(frozen=True)
class NotHeld:
    """The process does not hold the model an unload or a statistics read names;
    ``refusal`` is its "no such model", for when that is what the client gets."""

    process: Process
    refusal: Refusal


@dataclass(frozen=True)
class NoAnswer:
    process: Process
    error: str


Outcome = Applied | Refused | NotHeld | NoAnswer


def outcome_of(process: Process, operation: Operation, answer: Answer) -> Outcome:
    """``process``'s HTTP ``answer`` to ``operation``, as its outcome."""
    if not answer.status:
        return NoAnswer(process, answer.error)
    if answer.ok:
        return Applied(process, decode_value(answer.body))
    refusal = _refusal(answer)
    if answer.status == _NOT_FOUND and isinstance(operation, _ABOUT_A_HELD_MODEL):
        return NotHeld(process, refusal)
    return Refused(process, refusal)


def _refusal(answer: Answer) -> Refusal:
    """The refusal an answer carries; one made of its text and status when it carries
    none (a transport's own error page)."""
    try:
        return decode_refusal(answer.body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        text = answer.body.decode("utf-8", "replace")
        return refusal_of(StatusError(text, answer.status), answer.status)


async def ask(paths: PrivatePaths, process: Process, operation: Operation) -> Outcome:
    """``operation`` sent to ``process`` (on its ``rest-<i>.sock``): its outcome."""
    return outcome_of(process, operation, await deliver(paths.rest(process.index), operation))


def said(outcome: Outcome) -> str:
    """What a refusal says (its message), or why there was no answer."""
    match outcome:
        case Refused(_, refusal) | NotHeld(_, refusal):
            return refusal.message
        case NoAnswer(_, error):
            return error
        case _:
            return ""
