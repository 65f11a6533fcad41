"""Layouts, windows and the table: the benchmark's pure arithmetic.

A window's mean batch size is the statistics extension's counts over the window
(inference_count / execution_count read before and after it, summed over every
version and, with several replicas, over every server).
The table gives, per model and load, each layout's medians over rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Layout:
    """How a layout runs its batched models: ``servers`` independent inferd servers,
    each one protocol process with its own batcher, the model in ``parallel_workers``
    workers (0: in the process)."""

    servers: int
    parallel_workers: int

    @property
    def label(self) -> str:
        if self.servers > 1:
            return f"{self.servers} replicas (a batcher each)"
        where = "in process" if self.parallel_workers == 0 else "in 1 worker"
        return f"1 process, model {where}"

    @property
    def batchers(self) -> int:
        """How many batchers the model's requests are split over: one per server."""
        return self.servers


def layouts(replicas: Sequence[int]) -> list[Layout]:
    """One batcher with the model in a worker (parallel_workers 1, the single-process
    default), one batcher with the model in process, then ``replicas`` values: that
    many servers of one protocol process each, the model in it. That is what a
    batched model replicated in N protocol processes was (a batcher and a copy of the
    model per process, the requests split over them); the server no longer does it
    (supervisor/hosting_rules.py keeps such a model to one protocol process)."""
    return [Layout(1, 1), Layout(1, 0), *(Layout(count, 0) for count in replicas)]


@dataclass(frozen=True)
class Counts:
    """The statistics extension's totals of one model at one moment."""

    inferences: int  # rows run (inference_count)
    executions: int  # calls of the model (execution_count)

    def __add__(self, other: Counts) -> Counts:
        """Two servers' totals together (replicas: the layout's statistics)."""
        return Counts(self.inferences + other.inferences, self.executions + other.executions)


def counts_of(model_stats: Sequence[Mapping[str, Any]]) -> Counts:
    """The totals over every version in a ``model_stats`` answer."""
    return Counts(
        sum(int(entry["inference_count"]) for entry in model_stats),
        sum(int(entry["execution_count"]) for entry in model_stats),
    )


def mean_batch(before: Counts, after: Counts) -> float | None:
    """Rows per call over a window; None when no call ran in it."""
    executions = after.executions - before.executions
    if executions <= 0:
        return None
    return (after.inferences - before.inferences) / executions


@dataclass(frozen=True)
class Window:
    """One measured window: one layout, one model, one load, one round."""

    model: str
    connections: int
    layout: str
    round: int
    requests: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int  # non-2xx, socket errors and answers that were not the checked one
    mean_batch: float | None
    rows: int  # inference_count over the window: it must equal the requests answered
    processes: int  # in the servers' process groups during the window
    cpu_us_per_request: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return float(statistics.median(known)) if known else None


def summarize(windows: Sequence[Window]) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
    """Per (model, connections), per layout in first-run order: medians over rounds."""
    summary: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for key in dict.fromkeys((w.model, w.connections, w.layout) for w in windows):
        model, connections, layout = key
        runs = [w for w in windows if (w.model, w.connections, w.layout) == key]
        summary.setdefault((model, connections), {})[layout] = {
            "rounds": len(runs),
            "errors": sum(w.errors for w in runs),
            "processes": max(w.processes for w in runs),
            **{
                name: _median([getattr(w, name) for w in runs])
                for name in ("requests_per_s", "p50_ms", "p99_ms", "mean_batch",
                             "cpu_us_per_request")
            },
        }  # fmt: skip
    return summary


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(value: float | None, reference: float | None) -> str:
    return "-" if value is None or not reference else f"{value / reference:.2f}"


TABLE_HEAD = (
    "| model | connections | layout | req/s | of the best one batcher | p50 ms | p99 ms "
    "| mean batch | CPU us/req | processes | errors |",
    "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
)


def best_rate(rows: Mapping[str, Mapping[str, Any]], labels: Sequence[str]) -> float | None:
    """The highest median req/s among the layouts ``labels`` that ran."""
    rates = [rows[label]["requests_per_s"] for label in labels if label in rows]
    known = [rate for rate in rates if rate is not None]
    return max(known) if known else None


def markdown_table(
    summary: Mapping[tuple[str, int], Mapping[str, Mapping[str, Any]]],
    one_batcher: Sequence[str],
) -> list[str]:
    """One row per model, load and layout; ``of the best one batcher`` is req/s over
    the best of the ``one_batcher`` layouts' at the same model and load."""
    lines = list(TABLE_HEAD)
    for (model, connections), rows in summary.items():
        base = best_rate(rows, one_batcher)
        for index, (layout, row) in enumerate(rows.items()):
            first = f"{model} | {connections}" if index == 0 else " | "
            lines.append(
                f"| {first} | {layout} | {_cell(row['requests_per_s'], 0)} "
                f"| {_ratio(row['requests_per_s'], base)} | {_cell(row['p50_ms'], 2)} "
                f"| {_cell(row['p99_ms'], 2)} | {_cell(row['mean_batch'], 1)} "
                f"| {_cell(row['cpu_us_per_request'], 0)} | {row['processes']} "
                f"| {row['errors']} |"
            )
    return lines
