"""Runs, medians, ratios, tables and the JSON record: the harness's pure arithmetic.

Every comparison is side by side in one run: contenders take turns within a
round, the order alternates between rounds (A B, B A, ...) so slow drifts in
machine noise hit both sides, and the figures reported are medians over rounds
and their ratios. Ratios of medians are given with the median of the per-round
ratios, which pairs runs that were neighbours in time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .loadgen import LoadResult

T = TypeVar("T")
UNIT_WORDS = {"req": "request", "resp": "response"}
# The per-run figures summarized by their median, and compared as ratios.
FIGURES = ("requests_per_s", "p50_ms", "p99_ms", "cpu_us_per_request", "main_thread_us_per_request")


def alternate(items: Sequence[T], round_index: int) -> list[T]:
    """The order of one round: as given in even rounds, reversed in odd ones."""
    return list(items) if round_index % 2 == 0 else list(items)[::-1]


@dataclass(frozen=True)
class RunRecord:
    """One measured run of one contender."""

    case: str
    label: str
    round: int
    startup_s: float
    result: LoadResult
    # The server's CPU (all its processes) and its main thread's (the event loop, which
    # bounds req/s when other cores take the rest) per request; None without /proc.
    cpu_us_per_request: float | None = None
    main_thread_us_per_request: float | None = None

    def figure(self, name: str) -> float | None:
        if name in ("cpu_us_per_request", "main_thread_us_per_request"):
            value: float | None = getattr(self, name)
            return value
        return float(getattr(self.result, name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "label": self.label,
            "round": self.round,
            "startup_s": self.startup_s,
            "cpu_us_per_request": self.cpu_us_per_request,
            "main_thread_us_per_request": self.main_thread_us_per_request,
            **self.result.to_dict(),
        }


def median_or_none(values: Iterable[float | None]) -> float | None:
    """The median, or None when any value is missing (or there are none)."""
    known = list(values)
    if not known or any(v is None for v in known):
        return None
    return float(statistics.median(v for v in known if v is not None))


def summarize(records: Sequence[RunRecord]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per case, per contender (in first-run order): medians over rounds, errors summed."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for case, label in dict.fromkeys((r.case, r.label) for r in records):
        runs = [r for r in records if (r.case, r.label) == (case, label)]
        row: dict[str, Any] = {"runs": len(runs), "errors": sum(r.result.errors for r in runs)}
        row |= {name: median_or_none(r.figure(name) for r in runs) for name in FIGURES}
        summary.setdefault(case, {})[label] = row
    return summary


def paired_ratio(records: Sequence[RunRecord], case: str, a: str, b: str) -> float | None:
    """Median over rounds of a's req/s over b's in the same round."""
    by_round: dict[int, dict[str, float]] = {}
    for r in records:
        if r.case == case and r.label in (a, b):
            by_round.setdefault(r.round, {})[r.label] = r.result.requests_per_s
    pairs = [v[a] / v[b] for v in by_round.values() if a in v and b in v and v[b]]
    return float(statistics.median(pairs)) if pairs else None


def ratio(
    records: Sequence[RunRecord], summary: dict[str, dict[str, Any]], case: str, a: str, b: str
) -> dict[str, float | None] | None:
    """a's medians over b's (None where either lacks the figure); None if one never ran."""
    if a not in summary or b not in summary:
        return None
    out: dict[str, float | None] = {}
    for name in FIGURES:
        top, bottom = summary[a][name], summary[b][name]
        out[name] = top / bottom if top is not None and bottom else None
    out["paired_requests_per_s"] = paired_ratio(records, case, a, b)
    return out


def format_ratio(a: str, b: str, values: dict[str, float | None], unit: str = "req") -> str:
    def x(name: str) -> str:
        value = values.get(name)
        return f"x{value:.2f}" if value is not None else "-"

    rate = f"{unit}/s {x('requests_per_s')} (per round {x('paired_requests_per_s')})"
    line = f"{a}/{b}: {rate}"
    line += f", p50 {x('p50_ms')}, p99 {x('p99_ms')}"
    if values.get("cpu_us_per_request") is not None:
        line += f", CPU/{UNIT_WORDS.get(unit, unit)} {x('cpu_us_per_request')}"
    return line


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(rows: dict[str, dict[str, Any]], unit: str = "req") -> list[str]:
    """One case's medians as a text table."""
    width = max([len("contender"), *map(len, rows)]) + 2
    lines = [
        f"{'contender':<{width}}{'runs':>5}{unit + '/s':>11}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'errors':>8}{'CPU us/' + unit:>12}{'main us/' + unit:>13}"
    ]
    for label, row in rows.items():
        lines.append(
            f"{label:<{width}}{row['runs']:>5}{_cell(row['requests_per_s'], 1):>11}"
            f"{_cell(row['p50_ms'], 2):>9}{_cell(row['p99_ms'], 2):>9}{row['errors']:>8}"
            f"{_cell(row['cpu_us_per_request'], 0):>12}"
            f"{_cell(row['main_thread_us_per_request'], 0):>13}"
        )
    return lines


def format_run(record: RunRecord) -> str:
    r = record.result
    line = (
        f"{r.requests_per_s:9.1f} {r.unit}/s  p50 {r.p50_ms:7.2f} ms  p99 {r.p99_ms:7.2f} ms  "
        f"errors {r.errors}"
    )
    if record.cpu_us_per_request is not None:
        line += f"  CPU {record.cpu_us_per_request:5.0f} us/{r.unit}"
    return line + f"  (ready in {record.startup_s:.1f}s){r.detail()}"


def unit_of(records: Sequence[RunRecord], case: str) -> str:
    """What a case's rates count (its runs all use one load)."""
    return next((r.result.unit for r in records if r.case == case), "req")


def exit_status(records: Sequence[RunRecord], failures: Sequence[str]) -> int:
    """0 ok, 1 a run did not complete, 2 errors (non-2xx, socket or gRPC) in a run."""
    errors = sum(r.result.errors for r in records)
    if errors:
        print(f"\nFAILED: {errors} errors during measured runs", file=sys.stderr)
    if failures:
        print(f"\nFAILED: {len(failures)} run(s) did not complete", file=sys.stderr)
    return 1 if failures else 2 if errors else 0


def write_command_record(
    path: Path | None,
    command: str,
    args: argparse.Namespace,
    runs: Sequence[Mapping[str, Any]],
    **extra: Any,
) -> None:
    """``--json-out`` of a command that is not a side-by-side scenario, in the scenarios'
    shape: ``setup`` (the command and its arguments), ``runs`` (one row per measured run,
    ``label`` first; ``python -m benchmarks plot`` draws the rows that have
    ``requests_per_s`` and ``p99_ms``) and the command's own keys. Nothing without a path."""
    if path is None:
        return
    setup = {"scenario": command, "args": {k: str(v) for k, v in vars(args).items()}}
    record = {"setup": setup, "runs": [dict(run) for run in runs], **extra}
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
