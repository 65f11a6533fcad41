"""The memory benchmark's loop: train the model once, then for each round and each
``parallel_workers`` value run every server in turn (the order alternating), one at
a time; print the table and write the JSON record."""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..results import alternate
from .measure import RunRecord, run_one
from .model import ForestModel, train_forest
from .options import MemoryOptions
from .report import markdown, summarize

# What a run that fails may raise: a server that did not become ready or answered
# wrongly (RuntimeError, TimeoutError, VerificationError), a missing program (OSError).
RUN_FAILURES = (RuntimeError, TimeoutError, OSError, ValueError)
FAILURE_CHARS = 3000


def run(options: MemoryOptions) -> int:
    """The whole benchmark; 0 ok, 1 a run did not complete."""
    print(describe(options), flush=True)
    started = setup(options)
    with tempfile.TemporaryDirectory(prefix="inferd-memory-") as tmp:
        work = options.work_dir or Path(tmp)
        model = train_forest(options.trees, options.rows, work / "model")
        print(f"  {model.describe()}", flush=True)
        records, failures = run_rounds(options, model, work)
    lines = markdown(summarize(records), model.describe(), options.rounds, options.axis)
    lines += ["", machine_line(started)]
    print("\n".join(lines))
    started["elapsed_s"] = round(time.monotonic() - started.pop("monotonic"), 1)
    write_results(options, started, model, records, failures, lines)
    if failures:
        print(f"FAILED: {len(failures)} run(s) did not complete", file=sys.stderr)
    return 1 if failures else 0


def describe(options: MemoryOptions) -> str:
    servers = ", ".join(f"{s.label} ({s.implementation})" for s in options.servers)
    return (
        f"memory: {options.rounds} round(s); {options.axis} {list(options.workers)}; "
        f"servers {servers}; {options.requests_per_worker} checked answers per worker "
        f"before the PSS is read; one server at a time on {cpus()} CPUs"
    )


def run_rounds(
    options: MemoryOptions, model: ForestModel, work: Path
) -> tuple[list[RunRecord], list[str]]:
    records: list[RunRecord] = []
    failures: list[str] = []
    turn = 0
    for round_index in range(options.rounds):
        for workers in options.workers:
            for server in alternate(options.servers, turn):
                what = f"{server.label} {options.axis}={workers} round {round_index}"
                repo = work / f"round-{round_index}" / f"{server.label}-p{workers}"
                try:
                    record = run_one(options, server, workers, model, round_index, repo)
                except RUN_FAILURES as error:
                    message = f"{what}: {str(error)[-FAILURE_CHARS:]}"
                    print(f"  FAILED {message}", file=sys.stderr, flush=True)
                    failures.append(message)
                    continue
                records.append(record)
                print(run_line(record, options.axis), flush=True)
            turn += 1  # the servers' order alternates from one run to the next
    return records, failures


def run_line(record: RunRecord, axis: str = "parallel_workers") -> str:
    return (
        f"  {record.server:<15} {axis}={record.workers:<3} round {record.round}: "
        f"ready in {record.ready_s:5.1f} s, PSS {record.at_ready.pss_mib:6.0f} MiB at READY, "
        f"{record.served.pss_mib:6.0f} MiB after {record.answers} answers "
        f"({len(record.served.processes)} processes, p50 {record.answer_p50_ms:.1f} ms)"
    )


def setup(options: MemoryOptions) -> dict[str, Any]:
    return {
        "argv": sys.argv[1:],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "monotonic": time.monotonic(),
        "cpus": cpus(),
        "load_average": os.getloadavg(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "inferd_python": options.inferd_python,
        "inferd_src": str(options.inferd_src),
        "mlserver_python": options.mlserver_python,
        "servers": {s.label: s.implementation for s in options.servers},
        "workers": list(options.workers),
        "rounds": options.rounds,
        "requests_per_worker": options.requests_per_worker,
    }


def machine_line(started: dict[str, Any]) -> str:
    """How busy the machine was: other work on it slows the starts, not the PSS."""
    first, last = (
        "/".join(f"{value:.1f}" for value in averages)
        for averages in (started["load_average"], os.getloadavg())
    )
    return (
        f"Machine: {started['cpus']} CPUs, load average {first} at the start and {last} at "
        "the end; one server ran at a time."
    )


def write_results(
    options: MemoryOptions,
    started: dict[str, Any],
    model: ForestModel,
    records: Sequence[RunRecord],
    failures: Sequence[str],
    lines: Sequence[str],
) -> None:
    summary = summarize(records)
    result: dict[str, Any] = {
        "setup": started,
        "model": model.to_dict(),
        "runs": [record.to_dict() for record in records],
        "summary": {server: [row.to_dict() for row in rows] for server, rows in summary.items()},
        "failures": list(failures),
        "markdown": "\n".join(lines).strip() + "\n",
    }
    options.json_out.parent.mkdir(parents=True, exist_ok=True)
    options.json_out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\nresults: {options.json_out} ({started['elapsed_s']} s)")


def cpus() -> int:
    return os.cpu_count() or 1
