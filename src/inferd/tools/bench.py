"""``inferd bench``: a load generator for V2 servers in the spirit of perf_analyzer.

Each step is a fixed concurrency (closed loop) or a fixed request rate (open
loop). A step runs measurement windows until the last three agree on throughput
and p99 latency within ``stability`` (or ``max_windows`` ran), then reports
those three windows together: p50/p90/p95/p99, throughput, and the server's
own queue and compute time per request from the statistics extension. The load
runs in ``processes`` worker processes, each sending a pre-encoded request.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from inferd.tools.benchload import LoadSpec, Window, run_window
from inferd.tools.benchrequest import model_stats, request_payload
from inferd.tools.v2client import Endpoint

STABLE_WINDOWS = 3


@dataclass(frozen=True)
class BenchOptions:
    url: str
    model_name: str
    transport: str = "rest"  # rest | grpc
    binary: bool = False
    input_file: str | None = None
    batch_size: int = 1
    shapes: dict[str, list[int]] = field(default_factory=dict)
    concurrency: tuple[int, ...] = (1,)
    rates: tuple[float, ...] = ()  # open loop when given
    window_s: float = 2.0
    stability: float = 0.10
    max_windows: int = 5
    processes: int = max(1, (os.cpu_count() or 2) // 2)
    timeout_s: float = 30.0


@dataclass
class StepResult:
    """One step's measurement (the last STABLE_WINDOWS windows merged)."""

    concurrency: int
    rate: float
    requests: int
    errors: int
    unsent: int
    throughput: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    server_queue_us: float
    server_compute_us: float
    windows: int
    stable: bool
    first_error: str = ""
    client_cpu_us: float = 0.0  # the load processes' CPU per request sent

    @property
    def label(self) -> str:
        return f"{self.rate:g}/s" if self.rate else f"c={self.concurrency}"


def parse_steps(spec: str) -> tuple[int, ...]:
    """``8``, ``1,4,16``, ``1:64:x2`` (start:end:*factor) or ``1:9:+2`` (start:end:+step)."""
    if ":" not in spec:
        return tuple(int(part) for part in spec.split(","))
    start, end, *rest = spec.split(":")
    step = rest[0] if rest else "x2"
    low, high = int(start), int(end)
    if low < 1 or high < low:
        raise ValueError(f"{spec!r}: expected 1 <= start <= end")
    values = [low]
    grow: Callable[[int], int]
    if step.startswith(("x", "*")):
        factor = int(step[1:])
        grow = lambda value: value * factor  # noqa: E731
    else:
        increment = int(step.lstrip("+"))
        grow = lambda value: value + increment  # noqa: E731
    if grow(low) <= low:
        raise ValueError(f"{spec!r}: the step must grow")
    while grow(values[-1]) <= high:
        values.append(grow(values[-1]))
    return tuple(values)


def run_bench(options: BenchOptions, progress: Callable[[str], None] = print) -> list[StepResult]:
    with load_pool(options.processes) as pool:
        return measure(pool, options, progress)


def load_pool(processes: int) -> Any:
    """The load processes, kept across steps (and across servers, for ``inferd tune``)."""
    return multiprocessing.get_context("spawn").Pool(processes)  # grpc does not survive fork


def measure(
    pool: Any,
    options: BenchOptions,
    progress: Callable[[str], None] = print,
    stop: Callable[[StepResult], bool] = lambda result: False,
) -> list[StepResult]:
    """Every step of ``options`` in order, until one satisfies ``stop``."""
    endpoint = Endpoint.parse(options.url)
    payload = request_payload(options, endpoint)
    steps: list[tuple[int, float]] = [(0, rate) for rate in options.rates] or [
        (concurrency, 0.0) for concurrency in options.concurrency
    ]
    results = []
    for concurrency, rate in steps:
        result = _run_step(pool, options, endpoint, payload, concurrency, rate)
        progress(_progress_line(result))
        results.append(result)
        if stop(result):
            break
    return results


def _run_step(
    pool: Any,
    options: BenchOptions,
    endpoint: Endpoint,
    payload: bytes,
    concurrency: int,
    rate: float,
) -> StepResult:
    specs = _split(options, endpoint, payload, concurrency, rate)
    windows: list[list[Window]] = []
    before = model_stats(options, endpoint)
    while len(windows) < options.max_windows:
        windows.append(pool.map(run_window, specs))
        if len(windows) >= STABLE_WINDOWS and _stable(windows[-STABLE_WINDOWS:], options):
            break
    after = model_stats(options, endpoint)
    recent = windows[-STABLE_WINDOWS:]
    stable = len(windows) >= STABLE_WINDOWS and _stable(recent, options)
    return _summarize(recent, concurrency, rate, len(windows), stable, before, after)


def _split(
    options: BenchOptions, endpoint: Endpoint, payload: bytes, concurrency: int, rate: float
) -> list[LoadSpec]:
    """The step's load shared out between the processes (none gets zero connections)."""
    base = LoadSpec(
        endpoint, options.transport, payload, options.window_s, 1, 0.0, options.timeout_s
    )
    if rate > 0:
        share = max(1, min(options.processes, int(rate // 50) or 1))  # >= 50 req/s per process
        return [replace(base, rate=rate / share) for _ in range(share)]
    count = min(options.processes, concurrency)
    shares = [concurrency // count + (1 if i < concurrency % count else 0) for i in range(count)]
    return [replace(base, connections=share) for share in shares]


def _window_totals(parts: list[Window]) -> tuple[float, float]:
    """(throughput, p99 s) of one window over all processes."""
    latencies = np.concatenate([part.latencies for part in parts])
    seconds = max(part.seconds for part in parts)
    p99 = float(np.percentile(latencies, 99)) if latencies.size else 0.0
    return latencies.size / seconds, p99


def _stable(windows: list[list[Window]], options: BenchOptions) -> bool:
    totals = np.array([_window_totals(window) for window in windows])
    for column in totals.T:
        mean = column.mean()
        if mean == 0 or np.abs(column - mean).max() > options.stability * mean:
            return False
    return True


def _summarize(
    windows: list[list[Window]],
    concurrency: int,
    rate: float,
    count: int,
    stable: bool,
    before: dict[str, float],
    after: dict[str, float],
) -> StepResult:
    parts = [part for window in windows for part in window]
    latencies = np.concatenate([part.latencies for part in parts]) * 1000.0
    seconds = sum(max(part.seconds for part in window) for window in windows)
    p50, p90, p95, p99 = np.percentile(latencies, [50, 90, 95, 99]) if latencies.size else [0.0] * 4
    served = after.get("count", 0) - before.get("count", 0)

    def per_request(key: str) -> float:
        """Server time per request in microseconds, from the statistics' nanoseconds."""
        return (after.get(key, 0) - before.get(key, 0)) / served / 1000 if served else 0.0

    return StepResult(
        concurrency=concurrency,
        rate=rate,
        requests=int(latencies.size),
        errors=sum(part.errors for part in parts),
        unsent=sum(part.unsent for part in parts),
        throughput=latencies.size / seconds if seconds else 0.0,
        p50_ms=float(p50),
        p90_ms=float(p90),
        p95_ms=float(p95),
        p99_ms=float(p99),
        mean_ms=float(latencies.mean()) if latencies.size else 0.0,
        server_queue_us=per_request("queue_ns"),
        server_compute_us=per_request("compute_ns"),
        windows=count,
        stable=stable,
        first_error=next((part.first_error for part in parts if part.first_error), ""),
        client_cpu_us=_cpu_per_request(parts),
    )


def _cpu_per_request(parts: list[Window]) -> float:
    sent = sum(part.latencies.size + part.errors for part in parts)
    return sum(part.cpu_s for part in parts) / sent * 1e6 if sent else 0.0


def _progress_line(result: StepResult) -> str:
    line = (
        f"{result.label}: {result.throughput:.0f} req/s, p99 {result.p99_ms:.2f} ms "
        f"({result.windows} windows{'' if result.stable else ', not stable'})"
    )
    if result.errors:
        line += f"; {result.errors} errors, first: {result.first_error}"
    return line


def as_rows(results: list[StepResult]) -> list[dict[str, Any]]:
    return [asdict(result) for result in results]
