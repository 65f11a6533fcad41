"""One answer out of every process's outcome of the same call.

- :func:`settle`: an operation fanned out (a load, a region registered) answers
  as every process that applied it did, or with a refusal as its process gave it
  (outcomes.py: each process's answer is already a typed outcome here). A process
  that gave no answer at all (starting, restarting or gone) is left out: it
  catches up from the journal before it serves again. The model host's
  "no such model" (``NotHeld``) to an unload or a statistics read is no refusal:
  it holds only the models no protocol process copies.
- :func:`merge_statistics`: Triton's statistics of several processes as one
  server's, every count and nanosecond summed per model version and per batch size.
- :func:`held_anywhere`: an unregister's answer, the regions a request holds in
  any process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inferd.supervisor.outcomes import Applied, NoAnswer, NotHeld, Outcome, Refused

NO_PROCESS = "No protocol process answered"


@dataclass(frozen=True)
class Settled:
    """What a fanned-out call comes to.

    ``answer``: what the client gets (see :func:`settle`); None when no process
    answered. ``applied``: the processes that applied it, with their values, in
    process order. ``held``: how many processes are where it leaves them (those
    that applied it, and the model host that holds nothing of it): it is journaled
    when any is. ``refused`` and ``unanswered``: the processes that refused it or
    gave no answer."""

    answer: Applied | Refused | NotHeld | None
    applied: list[Applied] = field(default_factory=list)
    held: int = 0
    refused: list[Refused | NotHeld] = field(default_factory=list)
    unanswered: list[NoAnswer] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return isinstance(self.answer, Applied)

    @property
    def values(self) -> list[Any]:
        """What each process that applied it answered, in process order."""
        return [applied.value for applied in self.applied]


def settle(outcomes: Sequence[Outcome]) -> Settled:
    """Every process's outcome of one call, settled. The answer is the model host's
    refusal (it says why better than a protocol process's, which found the host's
    version unavailable), else the first protocol process's refusal, else the first
    that applied it (the host's "no such model" last: it applied nothing)."""
    applied: list[Applied] = []
    refused: list[Refused | NotHeld] = []
    unanswered: list[NoAnswer] = []
    host_holds_nothing: list[NotHeld] = []
    for outcome in sorted(outcomes, key=lambda outcome: outcome.process):
        match outcome:
            case Applied():
                applied.append(outcome)
            case NotHeld() if outcome.process.is_host:
                host_holds_nothing.append(outcome)
            case Refused() | NotHeld():
                refused.append(outcome)
            case NoAnswer():
                unanswered.append(outcome)
    held = len(applied) + len(host_holds_nothing)
    answer = _answer(refused, applied, host_holds_nothing)
    return Settled(answer, applied, held, refused, unanswered)


def _answer(
    refused: list[Refused | NotHeld], applied: list[Applied], host_holds_nothing: list[NotHeld]
) -> Applied | Refused | NotHeld | None:
    by_host = [outcome for outcome in refused if outcome.process.is_host]
    if by_host or refused:
        return (by_host or refused)[0]
    if applied:
        return applied[0]
    if host_holds_nothing:  # done there, with nothing to say
        return Applied(host_holds_nothing[0].process)
    return None


def held_anywhere(settled: Settled) -> list[str]:
    """An unregister's answer: the regions a request holds in any process (each
    process answers those it holds), so that none drops a region another still uses."""
    return sorted({name for value in settled.values for name in value or ()})


# Fields that say which statistics these are, not how many: kept as they are.
_IDENTITY = frozenset(("name", "version", "batch_size"))


def merge_statistics(per_process: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each process's ``model_stats`` list as one, ordered by name and version as
    one server orders it; a version any process knows is listed."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for stats in per_process:
        for model in stats:
            key = (model["name"], model.get("version") or "")
            merged[key] = _summed(merged[key], model) if key in merged else model
    return [merged[key] for key in sorted(merged)]


def _summed(into: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``into`` + ``other``, field by field: counts and nanoseconds add up, the last
    inference is the latest, batch sizes meet by size."""
    summed = dict(into)
    for key, value in other.items():
        mine = summed.get(key)
        if key in _IDENTITY or mine is None:
            summed.setdefault(key, value)
        elif key == "last_inference":
            summed[key] = max(mine, value)
        elif key == "batch_stats":
            summed[key] = _batch_stats_summed(mine, value)
        elif isinstance(value, dict):
            summed[key] = _summed(mine, value)
        elif isinstance(value, int) and not isinstance(value, bool):
            summed[key] = mine + value
    return summed


def _batch_stats_summed(
    mine: list[dict[str, Any]], other: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    by_size = {entry["batch_size"]: entry for entry in mine}
    for entry in other:
        size = entry["batch_size"]
        by_size[size] = _summed(by_size[size], entry) if size in by_size else entry
    return [by_size[size] for size in sorted(by_size)]
