"""A layout's servers per round: started, checked, their windows measured, stopped.

A layout is one server, or N replicas: N independent servers of one protocol
process each (their own repositories and ports, the device model's lock shared),
started together as ``benchmarks.scale`` starts its fleets. Each window runs one
``wrk`` per server at once, the connections split evenly (``scale/load.py``: a Lua
check of every answer, status 200 and the bytes of the checked answer), reads each
model's statistics on every server before and after the measured part (the mean
batch size, and rows that must equal the answers) and the CPU of the servers'
process groups; the layout's figures are the servers' summed (req/s, rows, CPU),
the median of their p50 and the highest p99.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.serverproc import ServerProcess, free_ports, spawn

from ..repository import settings_json, write_json
from ..scale.fleet import Endpoint, post, stop_all
from ..scale.load import Outcome, drive, split_load
from ..scenarios.base import VerificationError
from ..servers import INFERD, Contender, Programs, command_and_env, group_cpu_seconds
from .models import BatchedModel, write_repository
from .report import Counts, Layout, Window, counts_of, mean_batch

_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Plan:
    """What every window of a run does."""

    models: tuple[BatchedModel, ...]
    connections: tuple[int, ...]
    warmup_s: int
    duration_s: int
    threads: int
    fixed_ms: float
    row_ms: float
    ready_timeout: float
    model_settings: Mapping[str, Any] = field(default_factory=dict)  # both models get them


def spawn_server(
    layout: Layout, plan: Plan, programs: Programs, repo: Path, device_lock: Path
) -> ServerProcess:
    """``inferd start`` on a fresh repository, one protocol process through the
    environment (as the benchmarks pass it); not yet ready."""
    ports = free_ports(3)
    settings = {"parallel_workers": layout.parallel_workers, "debug": False}
    write_json(repo / "settings.json", settings_json(ports, settings))
    write_repository(repo, plan.fixed_ms, plan.row_ms, plan.model_settings, device_lock)
    command, env = command_and_env(Contender(INFERD, INFERD), programs, repo, ports[1], 1)
    return spawn(
        command, repository=repo, log_path=repo / "server.log", ports=ports, env=env, cwd=repo
    )


def start_servers(
    layout: Layout, plan: Plan, programs: Programs, folder: Path
) -> list[ServerProcess]:
    """Every server of ``layout`` started at once (one device lock in ``folder``),
    each ready within the plan's deadline; all stopped if one is not."""
    began = time.monotonic()
    servers: list[ServerProcess] = []
    try:
        for index in range(layout.servers):
            repo = folder / f"server-{index}"
            servers.append(spawn_server(layout, plan, programs, repo, folder / "device.lock"))
        for server in servers:
            server.wait_until(timeout=max(1.0, plan.ready_timeout - (time.monotonic() - began)))
    except BaseException:
        stop_all(servers)
        raise
    return servers


def checked_endpoint(server: ServerProcess, model: BatchedModel) -> Endpoint:
    """Two POSTs: 200, the expected output, the same bytes both times."""
    url = f"{server.url}/v2/models/{model.name}/infer"
    body = model.rest_body()
    first, second = post(url, body), post(url, body)
    try:
        data = json.loads(first)["outputs"][0]["data"]
    except (ValueError, KeyError, IndexError, TypeError):
        data = None
    if data is None or not np.allclose(data, model.expected, rtol=1e-6):
        raise VerificationError(f"POST {url}: expected {model.expected}, got {first!r}")
    if first != second:
        raise VerificationError(f"POST {url}: two answers differ: {first!r}, {second!r}")
    return Endpoint(url, body, first)


def read_counts(servers: Sequence[ServerProcess], model: str) -> Counts:
    """The model's totals from the statistics extension, summed over ``servers``."""
    total = Counts(0, 0)
    for server in servers:
        with _LOCAL.open(f"{server.url}/v2/models/{model}/stats", timeout=30) as answer:
            total += counts_of(json.loads(answer.read())["model_stats"])
    return total


def cpu_seconds(groups: Sequence[int]) -> float | None:
    """The CPU seconds of every process group in ``groups``; None without /proc."""
    readings = [group_cpu_seconds(group) for group in groups]
    known = [reading for reading in readings if reading is not None]
    return sum(known) if len(known) == len(readings) else None


def group_processes(pgid: int) -> int:
    """How many live processes the server's process group holds."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended meanwhile
        count += int(fields[2]) == pgid
    return count


def measure_window(
    servers: Sequence[ServerProcess],
    layout: Layout,
    model: BatchedModel,
    connections: int,
    round_index: int,
    plan: Plan,
) -> Window:
    endpoints = [checked_endpoint(server, model) for server in servers]
    share = split_load(len(servers), connections, plan.threads)
    if plan.warmup_s:
        drive(endpoints, "rest", share, plan.warmup_s, None)
    groups = [server.process.pid for server in servers]  # each leads its own group
    before, cpu_before = read_counts(servers, model.name), cpu_seconds(groups)
    outcomes = drive(endpoints, "rest", share, plan.duration_s, None)
    after, cpu_after = read_counts(servers, model.name), cpu_seconds(groups)
    requests = sum(outcome.result.requests for outcome in outcomes)
    cpu = None
    if cpu_before is not None and cpu_after is not None and requests:
        cpu = (cpu_after - cpu_before) / requests * 1e6
    return Window(
        model=model.name,
        connections=connections,
        layout=layout.label,
        round=round_index,
        requests=requests,
        mean_batch=mean_batch(before, after),
        rows=after.inferences - before.inferences,
        processes=sum(group_processes(group) for group in groups),
        cpu_us_per_request=cpu,
        **latency_and_rate(outcomes),
    )


def latency_and_rate(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The servers' load together, as ``benchmarks.scale`` sums a fleet's: req/s and
    errors summed, the median of their p50s, the highest p99."""
    results = [outcome.result for outcome in outcomes]
    return {
        "requests_per_s": sum(result.requests_per_s for result in results),
        "p50_ms": float(statistics.median(result.p50_ms for result in results)),
        "p99_ms": max(result.p99_ms for result in results),
        "errors": sum(outcome.errors for outcome in outcomes),
    }


def measure_layout(
    layout: Layout, round_index: int, plan: Plan, programs: Programs, folder: Path
) -> list[Window]:
    """Every model at every load on the servers of ``layout``."""
    layout_folder = folder / f"r{round_index}-{layout.servers}x{layout.parallel_workers}"
    servers = start_servers(layout, plan, programs, layout_folder)
    windows = []
    try:
        for model in plan.models:
            for connections in plan.connections:
                window = measure_window(servers, layout, model, connections, round_index, plan)
                print(f"  {format_window(window)}", flush=True)
                warn_rows(window)
                windows.append(window)
    finally:
        stop_all(servers)
    return windows


def format_window(window: Window) -> str:
    batch = "-" if window.mean_batch is None else f"{window.mean_batch:.1f}"
    return (
        f"{window.model:<7} c{window.connections:<4} {window.layout:<28} "
        f"{window.requests_per_s:8.0f} req/s  p50 {window.p50_ms:6.2f} ms  "
        f"p99 {window.p99_ms:7.2f} ms  batch {batch:>5}  errors {window.errors}"
    )


def warn_rows(window: Window) -> None:
    """The statistics must count what the window sent: a request wrk's window cut off
    may still run after it ends, so a few more rows are fine, fewer are not."""
    if window.rows < window.requests:
        print(
            f"  WARNING: statistics counted {window.rows} rows for {window.requests} answers",
            file=sys.stderr,
        )
