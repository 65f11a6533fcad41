"""What one process did with one operation the coordinator sent it, as a type.

The coordinator sends an operation to each process's private ``operations-<i>.sock``
(:func:`ask`: one call in ipc frames, workers/private_calls.py) and reads its reply
once, here, into one of four outcomes, each carrying the :class:`Process` it came
from:

- :class:`Applied`: the process applied it; ``value`` is what it answered (None,
  the log settings in force, its statistics, the regions its requests hold);
- :class:`Refused`: it refused it; ``error`` is the error as it raised it (rebuilt
  as its class: an InferdError, server/errors.py ``portable_error``);
- :class:`NotHeld`: an unload or a statistics read of a model the process does
  not hold ("no such model"). The model host holds only the models no protocol
  process copies, so from it this is no refusal; from a protocol process it is
  one (merging.py ``settle`` decides which, knowing the process);
- :class:`NoAnswer`: nothing answered (its socket missing or refused: starting,
  restarting, gone); ``error`` says what the transport found.

Settling (merging.py), the host's order (host_order.py) and the journal work on
these; the coordinator answers the forwarding process with the settled outcome's
value or error (coordinator_calls.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferd.errors import ErrorCode, InferdError
from inferd.serving.operations import UNLOADS, Operation, ReadStatistics
from inferd.supervisor.paths import PrivatePaths
from inferd.workers.private_calls import CallUnanswered, call

# A "no such model" refusal, to an unload or a statistics read: the model is not held.
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
    error: Exception


@dataclass(frozen=True)
class NotHeld:
    """The process does not hold the model an unload or a statistics read names;
    ``error`` is its "no such model", for when that is what the client gets."""

    process: Process
    error: Exception


@dataclass(frozen=True)
class NoAnswer:
    process: Process
    error: str


Outcome = Applied | Refused | NotHeld | NoAnswer


async def ask(paths: PrivatePaths, process: Process, operation: Operation) -> Outcome:
    """``operation`` sent to ``process`` (on its ``operations-<i>.sock``): its outcome."""
    try:
        value = await call(paths.operations(process.index), operation)
    except CallUnanswered as error:
        return NoAnswer(process, str(error))
    except Exception as error:
        if isinstance(operation, _ABOUT_A_HELD_MODEL) and _not_found(error):
            return NotHeld(process, error)
        return Refused(process, error)
    return Applied(process, value)


def _not_found(error: Exception) -> bool:
    return isinstance(error, InferdError) and error.code is ErrorCode.NOT_FOUND


def said(outcome: Outcome) -> str:
    """What a refusal says (its message), or why there was no answer."""
    match outcome:
        case Refused(_, error) | NotHeld(_, error):
            return str(error)
        case NoAnswer(_, why):
            return why
        case _:
            return ""
