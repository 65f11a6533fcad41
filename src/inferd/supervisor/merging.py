"""One answer out of every protocol process's answer to the same call.

- :func:`settle`: an operation fanned out (a load, a region registered) answers
  as every process that answered did, or with the first failure as its process
  gave it (status, body, ``Retry-After``). A process that gave no answer at all
  (its socket missing or refused: it is starting, restarting or gone) is left
  out: it catches up from the journal before it serves again.
- :func:`merge_statistics`: Triton's statistics of several processes as one
  server's, every count and nanosecond summed per model version and per batch size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inferd.supervisor.fanout import Answer

NO_PROCESS = "No protocol process answered"


@dataclass(frozen=True)
class Settled:
    """What a fanned-out call comes to.

    ``answer``: the first failure, else the first success; None when no process
    answered. ``applied``: how many processes applied it. ``failed`` and
    ``unreached``: the indexes of the processes that refused it or gave no answer."""

    answer: Answer | None
    applied: int
    failed: list[int] = field(default_factory=list)
    unreached: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.answer is not None and self.answer.ok


def settle(answers: Sequence[Answer]) -> Settled:
    """The answers of processes 0..n-1 (in that order) to one call, settled."""
    failed = [index for index, answer in enumerate(answers) if answer.status and not answer.ok]
    unreached = [index for index, answer in enumerate(answers) if not answer.status]
    succeeded = [answer for answer in answers if answer.ok]
    if failed:
        chosen: Answer | None = answers[failed[0]]
    else:
        chosen = succeeded[0] if succeeded else None
    return Settled(chosen, len(succeeded), failed, unreached)


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
