"""``inferd tune``: find the settings that serve a model fastest under a p99 bound.

It follows the procedure MLServer's and Seldon's tuning guides describe, as Triton's
Model Analyzer automates it for Triton: measure the defaults, then the number of
worker processes, then threads per worker, then adaptive batching, each phase
starting from the best so far. Each candidate is a real ``inferd start`` on a
copy of the model's folder (its files linked, its model-settings.json rewritten),
measured by the bench engine with a concurrency sweep that stops once p99 passes
the bound; a candidate's score is its best throughput within the bound. Runs
stop when the time budget would be overrun.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferd.tools.bench import BenchOptions, StepResult, load_pool, measure
from inferd.tools.tuneserver import TunedServer, effective_settings

SERVER_KEYS = ("parallel_workers",)
# A candidate must beat the defaults by this much to be recommended: smaller
# differences are within what repeated runs of one setting vary by.
MIN_GAIN = 1.05
MODEL_KEYS = ("threads_per_worker", "max_batch_size", "max_batch_time")


@dataclass(frozen=True)
class TuneOptions:
    repository: Path
    model_name: str
    p99_ms: float
    budget_s: float = 300.0
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    workers: tuple[int, ...] = ()  # default: 1 .. cores, doubling
    threads: tuple[int, ...] = (2,)
    batch_sizes: tuple[int, ...] = (8, 32)
    batch_times: tuple[float, ...] = (0.001, 0.005)
    window_s: float = 1.0
    max_windows: int = 3
    processes: int = 1
    batch_size: int = 1  # rows per request the load sends


@dataclass
class Candidate:
    """One set of settings and what it measured (None: not measured)."""

    name: str
    settings: dict[str, Any]
    best: StepResult | None = None
    steps: list[StepResult] = field(default_factory=list)
    error: str = ""

    @property
    def throughput(self) -> float:
        return self.best.throughput if self.best else 0.0


@dataclass
class TuneReport:
    defaults: Candidate
    candidates: list[Candidate]
    skipped: int
    seconds: float
    rerun: tuple[Candidate, Candidate] | None = None  # (defaults, best) measured again

    @property
    def best(self) -> Candidate:
        first_runs = [c for c in self.candidates if not c.name.endswith("(again)")]
        return max(first_runs, key=lambda candidate: candidate.throughput)

    @property
    def improved(self) -> bool:
        """The best beat the defaults by MIN_GAIN, and again when both were re-measured."""
        pairs = [(self.defaults, self.best), *([self.rerun] if self.rerun else [])]
        return self.best is not self.defaults and all(
            best.throughput > defaults.throughput * MIN_GAIN for defaults, best in pairs
        )


def default_workers() -> tuple[int, ...]:
    cores, values = os.cpu_count() or 1, [1]
    while values[-1] * 2 <= cores:
        values.append(values[-1] * 2)
    return tuple(values)


def phases(options: TuneOptions) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The settings each phase tries, applied on top of the best so far."""
    yield (
        "parallel_workers",
        [{"parallel_workers": n} for n in options.workers or default_workers()],
    )
    yield "threads_per_worker", [{"threads_per_worker": n} for n in options.threads]
    yield (
        "batching",
        [
            {"max_batch_size": size, "max_batch_time": wait}
            for size in options.batch_sizes
            for wait in options.batch_times
        ],
    )


def run_tune(options: TuneOptions, progress: Callable[[str], None]) -> TuneReport:
    started = time.monotonic()
    pool = load_pool(options.processes)
    try:
        tuner = _Tuner(options, pool, progress, started)
        configured = effective_settings(options.repository, options.model_name)
        progress(f"defaults: {_describe(configured)}")
        defaults = tuner.evaluate("defaults", configured)
        best, skipped = defaults, 0
        for phase, settings_list in phases(options):
            progress(f"phase {phase}, from: {_describe(best.settings)}")
            for settings in settings_list:
                merged = {**best.settings, **settings}
                if any(c.settings == merged for c in tuner.measured):
                    continue
                if not tuner.fits_budget():
                    skipped += 1
                    continue
                candidate = tuner.evaluate(_describe(settings), merged)
                if candidate.throughput > best.throughput:
                    best = candidate
        rerun = _confirm(tuner, defaults, best)
    finally:
        pool.terminate()
    return TuneReport(defaults, tuner.measured, skipped, time.monotonic() - started, rerun)


def _confirm(
    tuner: _Tuner, defaults: Candidate, best: Candidate
) -> tuple[Candidate, Candidate] | None:
    """Measure the defaults and the winner once more, back to back: on a busy machine
    a one-off measurement can win by luck. None when there is no winner or no time."""
    if best is defaults or not tuner.fits_budget(runs=2):
        return None
    again = tuner.evaluate("defaults (again)", defaults.settings)
    return again, tuner.evaluate(f"{best.name} (again)", best.settings)


class _Tuner:
    def __init__(self, options: TuneOptions, pool: Any, progress: Any, started: float) -> None:
        self.options, self.pool, self.progress, self.started = options, pool, progress, started
        self.measured: list[Candidate] = []
        self.costs: list[float] = []

    def fits_budget(self, runs: int = 1) -> bool:
        cost = max(self.costs) if self.costs else 0.0
        return time.monotonic() - self.started + runs * cost <= self.options.budget_s

    def evaluate(self, name: str, settings: dict[str, Any]) -> Candidate:
        began = time.monotonic()
        candidate = Candidate(name, settings)
        self.progress(f"[{time.monotonic() - self.started:5.0f} s] {name} ...")
        try:
            with TunedServer(self.options.repository, self.options.model_name, settings) as server:
                candidate.steps = measure(
                    self.pool, self._bench(server.http_url), lambda line: None, self._too_slow
                )
        except (OSError, RuntimeError, ValueError) as error:
            candidate.error = str(error).splitlines()[0][:200]
        within = [s for s in candidate.steps if s.p99_ms <= self.options.p99_ms and not s.errors]
        candidate.best = max(within, key=lambda step: step.throughput, default=None)
        self.progress(f"        {_outcome(candidate)}")
        self.measured.append(candidate)
        self.costs.append(time.monotonic() - began)
        return candidate

    def _too_slow(self, step: StepResult) -> bool:
        return step.p99_ms > self.options.p99_ms or step.errors > 0

    def _bench(self, url: str) -> BenchOptions:
        return BenchOptions(
            url=url,
            model_name=self.options.model_name,
            batch_size=self.options.batch_size,
            concurrency=self.options.concurrency,
            window_s=self.options.window_s,
            max_windows=self.options.max_windows,
            processes=self.options.processes,
        )


def _describe(settings: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in settings.items()) or "as configured"


def _outcome(candidate: Candidate) -> str:
    if candidate.error:
        return f"failed: {candidate.error}"
    if candidate.best is None:
        return "no step met the p99 bound"
    best = candidate.best
    return (
        f"{best.throughput:.0f} req/s at concurrency {best.concurrency}, p99 {best.p99_ms:.2f} ms"
    )


def fragments(candidate: Candidate, defaults: Candidate) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (settings.json, model-settings.json) entries a candidate changes."""
    changed = {k: v for k, v in candidate.settings.items() if defaults.settings.get(k) != v}
    server = {k: v for k, v in changed.items() if k in SERVER_KEYS}
    model = {k: v for k, v in changed.items() if k in MODEL_KEYS}
    return server, model


def report_text(report: TuneReport, p99_ms: float) -> str:
    lines = [f"{'candidate':64} {'req/s':>8} {'conc':>5} {'p99 ms':>8}"]
    for candidate in report.candidates:
        step = candidate.best
        row = f"{candidate.name[:64]:64} {candidate.throughput:8.0f} "
        row += f"{step.concurrency:5d} {step.p99_ms:8.2f}" if step else f"{'-':>5} {'-':>8}"
        lines.append(row)
    lines.append("")
    if report.improved:
        best, defaults = report.best, report.defaults
        gain = best.throughput / defaults.throughput if defaults.throughput else float("inf")
        lines.append(
            f"Best within p99 <= {p99_ms:g} ms: {best.name} -- {best.throughput:.0f} req/s, "
            f"{gain:.2f}x the defaults' {defaults.throughput:.0f} req/s."
        )
        if report.rerun:
            again_defaults, again_best = report.rerun
            lines.append(
                f"Measured again: {again_best.throughput:.0f} req/s against the defaults' "
                f"{again_defaults.throughput:.0f} req/s."
            )
        server, model = fragments(best, defaults)
        lines.append("settings.json: " + json.dumps(server))
        lines.append("model-settings.json: " + json.dumps(model))
    else:
        lines.append(
            f"No candidate beat the defaults ({report.defaults.throughput:.0f} req/s within "
            f"p99 <= {p99_ms:g} ms) by {MIN_GAIN - 1:.0%} or more"
            f"{' in both measurements' if report.rerun else ''}: keep the settings as they are."
        )
    if report.skipped:
        lines.append(f"{report.skipped} candidates were not measured: the budget ran out.")
    lines.append(f"Tuning took {report.seconds:.0f} s.")
    return "\n".join(lines)
