"""The memory benchmark's medians over rounds and its markdown table.

One row per ``parallel_workers`` value and, side by side, for each server: the
PSS of its process tree after the checked answers (and how many processes it
had), what each worker added over the fewest workers measured (the issue's
"+163 MiB per added worker"), and the time to the model READY (and its ratio to
the fewest workers' time: issue 26 asks for at most 1.5x).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .measure import RunRecord


@dataclass(frozen=True)
class Row:
    """One server at one ``parallel_workers`` value: medians over its rounds."""

    server: str
    workers: int
    rounds: int
    pss_mib: float  # after the answers
    pss_at_ready_mib: float
    uss_mib: float  # private pages alone: what other processes of the machine cannot change
    processes: int
    ready_s: float
    first_answer_ms: float | None = None  # after a load after the start (None: at start)
    per_added_worker_mib: float | None = None  # over the fewest workers (>= 1) measured
    ready_ratio: float | None = None  # ready_s over the fewest workers' (>= 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            key: round(value, 3) if isinstance(value, float) else value
            for key, value in asdict(self).items()
        }


def summarize(records: Iterable[RunRecord]) -> dict[str, list[Row]]:
    """server -> its rows by ``parallel_workers``, the servers in the order they first ran."""
    grouped: dict[str, dict[int, list[RunRecord]]] = {}
    for record in records:
        grouped.setdefault(record.server, {}).setdefault(record.workers, []).append(record)
    return {
        server: with_growth([_row(runs[w]) for w in sorted(runs)])
        for server, runs in grouped.items()
    }


def _row(runs: Sequence[RunRecord]) -> Row:
    return Row(
        server=runs[0].server,
        workers=runs[0].workers,
        rounds=len(runs),
        pss_mib=statistics.median(run.served.pss_mib for run in runs),
        pss_at_ready_mib=statistics.median(run.at_ready.pss_mib for run in runs),
        uss_mib=statistics.median(run.served.uss_mib for run in runs),
        processes=max(len(run.served.processes) for run in runs),
        ready_s=statistics.median(run.ready_s for run in runs),
        first_answer_ms=_median_or_none([run.first_answer_ms for run in runs]),
    )


def _median_or_none(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def with_growth(rows: Sequence[Row]) -> list[Row]:
    """Each row with its PSS per added worker and ready-time ratio over the row of the
    fewest workers (at least one: 0 serves in the main process, no worker)."""
    base = next((row for row in rows if row.workers >= 1), None)
    if base is None:
        return list(rows)
    grown: list[Row] = []
    for row in rows:
        added = row.workers - base.workers
        per_worker = (row.pss_mib - base.pss_mib) / added if added > 0 else None
        ratio = row.ready_s / base.ready_s if row.workers >= 1 and base.ready_s > 0 else None
        grown.append(Row(**(asdict(row) | {"per_added_worker_mib": per_worker,
                                           "ready_ratio": ratio})))  # fmt: skip
    return grown


def markdown_table(summary: dict[str, list[Row]], axis: str = "parallel_workers") -> list[str]:
    """One row per ``parallel_workers`` value, each server's three columns side by side."""
    servers = list(summary)
    if not servers:
        return ["No run was measured."]
    header = [axis]
    for server in servers:
        header += [f"{server} PSS MiB (procs)", f"{server} +MiB/worker", f"{server} ready s"]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    cells = {(row.server, row.workers): row for rows in summary.values() for row in rows}
    for workers in sorted({workers for _, workers in cells}):
        line = [str(workers)]
        for server in servers:
            line += _cells(cells.get((server, workers)))
        lines.append("| " + " | ".join(line) + " |")
    return lines


def _cells(row: Row | None) -> list[str]:
    if row is None:
        return ["-", "-", "-"]
    added = "-" if row.per_added_worker_mib is None else f"{row.per_added_worker_mib:+.0f}"
    ratio = "" if row.ready_ratio is None else f" (x{row.ready_ratio:.1f})"
    return [f"{row.pss_mib:.0f} ({row.processes})", added, f"{row.ready_s:.1f}{ratio}"]


LEGEND = (
    "PSS: proportional set size summed over the server's whole process tree, read after "
    "the checked answers (a page shared by N processes counts 1/N in each); procs: how "
    "many processes the tree had then; +MiB/worker: (PSS - PSS at the fewest workers) / "
    "the workers added; ready s: from the server's start to /v2/models/forest/ready "
    "answering 200, and (xR) its ratio to the fewest workers' time; for inferd-api, "
    "-poll and -request (the model loaded after the start, its folder put into the "
    "repository once the server was ready): the load's own time, from the folder written "
    "to the model ready (the load call; the poll's finding it; the first request's answer)."
)


def first_answer_line(summary: dict[str, list[Row]], axis: str) -> str | None:
    """The first request's time after a load after the start, by ``axis`` value."""
    parts = []
    for server, rows in summary.items():
        times = [f"{row.first_answer_ms:.0f}" for row in rows if row.first_answer_ms is not None]
        if times:
            parts.append(f"{server} " + " / ".join(times))
    if not parts:
        return None
    return f"First request after the load by {axis}, ms: " + "; ".join(parts) + "."


def uss_line(summary: dict[str, list[Row]], axis: str = "parallel_workers") -> str:
    """The private memory (USS) of each server's tree, by worker count: steady where the
    PSS of shared library pages moves with what else runs on the machine."""
    parts = [
        f"{server} " + " / ".join(f"{row.uss_mib:.0f}" for row in rows)
        for server, rows in summary.items()
    ]
    return f"USS (private pages only) by {axis}, MiB: " + "; ".join(parts) + "."


def markdown(
    summary: dict[str, list[Row]], title: str, rounds: int, axis: str = "parallel_workers"
) -> list[str]:
    medians = f" Medians over {rounds} rounds." if rounds > 1 else ""
    lines = ["", f"{title}:", "", *markdown_table(summary, axis), "", LEGEND + medians]
    if not summary:
        return lines
    first = first_answer_line(summary, axis)
    return [*lines, "", uss_line(summary, axis), *(["", first] if first else [])]
