"""One server per layout and round: started, checked, its windows measured, stopped.

Each window runs ``wrk`` with a Lua check of every answer (status 200 and the
bytes of the checked answer, ``benchmarks.scale.load``), reads the model's
statistics before and after the measured part (the mean batch size, and rows that
must equal the answers), and the CPU of the server's process group.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.serverproc import ServerProcess, free_ports, spawn

from ..repository import settings_json, write_json
from ..scale.fleet import Endpoint, post
from ..scale.load import Share, run_wrk
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


def start_server(layout: Layout, plan: Plan, programs: Programs, repo: Path) -> ServerProcess:
    """``inferd start`` on a fresh repository, ``protocol_processes`` through the
    environment (as the benchmarks pass it), ready within the plan's deadline."""
    ports = free_ports(3)
    settings = {"parallel_workers": layout.parallel_workers, "debug": False}
    write_json(repo / "settings.json", settings_json(ports, settings))
    write_repository(repo, plan.fixed_ms, plan.row_ms, plan.model_settings)
    contender = Contender(INFERD, INFERD)
    command, env = command_and_env(contender, programs, repo, ports[1], layout.protocol_processes)
    server = spawn(
        command, repository=repo, log_path=repo / "server.log", ports=ports, env=env, cwd=repo
    )
    try:
        server.wait_until(timeout=plan.ready_timeout)
    except BaseException:
        server.stop()
        raise
    return server


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


def read_counts(server: ServerProcess, model: str) -> Counts:
    """The model's totals from the statistics extension (every process's, summed)."""
    with _LOCAL.open(f"{server.url}/v2/models/{model}/stats", timeout=30) as answer:
        return counts_of(json.loads(answer.read())["model_stats"])


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
    server: ServerProcess,
    layout: Layout,
    model: BatchedModel,
    connections: int,
    round_index: int,
    plan: Plan,
) -> Window:
    endpoint = checked_endpoint(server, model)
    share = Share(connections, min(plan.threads, connections))
    if plan.warmup_s:
        run_wrk(endpoint, share, plan.warmup_s, None)
    pgid = server.process.pid  # it leads its own process group
    before, cpu_before = read_counts(server, model.name), group_cpu_seconds(pgid)
    outcome = run_wrk(endpoint, share, plan.duration_s, None)
    after, cpu_after = read_counts(server, model.name), group_cpu_seconds(pgid)
    result = outcome.result
    cpu = None
    if cpu_before is not None and cpu_after is not None and result.requests:
        cpu = (cpu_after - cpu_before) / result.requests * 1e6
    return Window(
        model=model.name,
        connections=connections,
        layout=layout.label,
        round=round_index,
        requests=result.requests,
        requests_per_s=result.requests_per_s,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        errors=outcome.errors,
        mean_batch=mean_batch(before, after),
        rows=after.inferences - before.inferences,
        processes=group_processes(pgid),
        cpu_us_per_request=cpu,
    )


def measure_layout(
    layout: Layout, round_index: int, plan: Plan, programs: Programs, folder: Path
) -> list[Window]:
    """Every model at every load on one server of ``layout``."""
    repo = folder / f"r{round_index}-{layout.protocol_processes}x{layout.parallel_workers}"
    server = start_server(layout, plan, programs, repo)
    windows = []
    try:
        for model in plan.models:
            for connections in plan.connections:
                window = measure_window(server, layout, model, connections, round_index, plan)
                print(f"  {format_window(window)}", flush=True)
                warn_rows(window)
                windows.append(window)
    finally:
        server.stop()
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
