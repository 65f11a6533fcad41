"""The scale benchmark's loop: for each round and layout, start its servers, then for
each model and protocol warm up, measure one window, record; stop the servers."""

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
from ..servers import Programs
from .cpu import snapshot, window
from .fleet import Fleet, start_fleet
from .load import drive, split_load
from .models import ScaleModel, build_models
from .options import Layout, ScaleOptions, format_cpus
from .report import (
    WindowRecord,
    machine_line,
    markdown,
    run_line,
    summarize,
    window_record,
)

# What a layout that fails may raise: a server that did not start or answered wrongly
# (RuntimeError, TimeoutError, VerificationError), a load generator (RuntimeError,
# OSError), a missing program (OSError, ValueError).
LAYOUT_FAILURES = (RuntimeError, TimeoutError, OSError, ValueError)
FAILURE_CHARS = 3000


def run(options: ScaleOptions) -> int:
    """The whole benchmark; 0 ok, 1 a layout did not complete, 2 errors under load."""
    print(describe(options), flush=True)
    started = setup(options)
    models = build_models(
        options.models, options.heavy_trees, options.mlp_call_ms, options.mlp_row_ms
    )
    for model in models:
        print(f"  {model.describe()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="inferd-scale-") as tmp:
        records, failures = run_rounds(options, models, options.work_dir or Path(tmp))
    lines = markdown(summarize(records), {m.name: m.describe() for m in models}, options.rounds)
    lines += [
        "",
        options.cores.describe() + ".",
        machine_line(records, cpus(), started["load_average"]),
    ]
    print("\n".join(lines))
    started["elapsed_s"] = round(time.monotonic() - started["monotonic"], 1)
    write_results(options, started, models, records, failures, lines)
    return exit_status(records, failures)


def describe(options: ScaleOptions) -> str:
    layouts = ", ".join(layout.label for layout in options.layouts)
    return (
        f"scale: {options.rounds} round(s); windows of {options.duration} s after "
        f"{options.warmup} s of warm-up; layouts {layouts}; models {list(options.models)}; "
        f"protocols {list(options.protocols)}; {options.connections} connections and "
        f"{options.load_threads} load thread(s) per layout (at least one per server)\n"
        f"{options.cores.describe()}"
    )


def run_rounds(
    options: ScaleOptions, models: Sequence[ScaleModel], work: Path
) -> tuple[list[WindowRecord], list[str]]:
    records: list[WindowRecord] = []
    failures: list[str] = []
    for round_index in range(options.rounds):
        for layout in alternate(options.layouts, round_index):
            name = f"{options.layouts.index(layout)}-{folder_name(layout.label)}"
            folder = work / f"round-{round_index}" / name
            try:
                run_layout(options, models, layout, round_index, folder, records)
            except LAYOUT_FAILURES as error:
                message = f"{layout.label} round {round_index}: {str(error)[-FAILURE_CHARS:]}"
                print(f"  FAILED {message}", file=sys.stderr, flush=True)
                failures.append(message)
    return records, failures


def folder_name(label: str) -> str:
    """A layout's label as a folder name (settings may hold quotes and slashes)."""
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in label.replace(" ", ""))


def run_layout(
    options: ScaleOptions,
    models: Sequence[ScaleModel],
    layout: Layout,
    round_index: int,
    folder: Path,
    records: list[WindowRecord],
) -> None:
    """Start the layout's servers, measure each model and protocol, stop them; each
    window's record is appended as it ends (a later failure keeps the earlier ones)."""
    programs = Programs(options.inferd_python, options.inferd_src)
    server_cores = options.cores.pin(options.cores.server)
    fleet = start_fleet(layout, models, programs, server_cores, folder, options.ready_timeout)
    print(f"\n{layout.label}: {layout.servers} server(s) ready in {fleet.startup_s:.1f} s",
          flush=True)  # fmt: skip
    try:
        for model in models:
            for protocol in options.protocols:
                records.append(measure(options, fleet, model, protocol, round_index))
    finally:
        fleet.stop()


def measure(
    options: ScaleOptions, fleet: Fleet, model: ScaleModel, protocol: str, round_index: int
) -> WindowRecord:
    """Check every server's answer, warm up, then one measured window."""
    endpoints = fleet.endpoints(model, protocol)
    share = split_load(fleet.layout.servers, options.connections, options.load_threads)
    load_cores = options.cores.pin(options.cores.load)
    if options.warmup:
        warm = drive(endpoints, protocol, share, options.warmup, load_cores)
        wrong = sum(outcome.errors for outcome in warm)
        if wrong:
            print(f"  WARNING warm-up: {wrong} errors", file=sys.stderr, flush=True)
    before = snapshot(fleet.groups)
    outcomes = drive(endpoints, protocol, share, options.duration, load_cores)
    after = snapshot(fleet.groups)
    fleet.check_running()
    cpu = window(before, after, fleet.groups)
    record = window_record(round_index, fleet.layout, model.name, protocol, outcomes, cpu)
    print(run_line(record), flush=True)
    return record


def write_results(
    options: ScaleOptions,
    started: dict[str, Any],
    models: Sequence[ScaleModel],
    records: Sequence[WindowRecord],
    failures: Sequence[str],
    tables: Sequence[str],
) -> None:
    result: dict[str, Any] = {
        "setup": started,
        "models": {m.name: {"title": m.title, "predict_ms": m.predict_ms} for m in models},
        "windows": [record.to_dict() for record in records],
        "failures": list(failures),
        "markdown": "\n".join(tables).strip() + "\n",
    }
    options.json_out.parent.mkdir(parents=True, exist_ok=True)
    options.json_out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\nresults: {options.json_out} ({started['elapsed_s']} s)")


def setup(options: ScaleOptions) -> dict[str, Any]:
    """The run's settings and the machine as it starts."""
    cores = options.cores
    return {
        "argv": sys.argv[1:],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "monotonic": time.monotonic(),
        "cpus": cpus(),
        "server_cores": format_cpus(cores.server),
        "load_cores": format_cpus(cores.load),
        "shared_cores": cores.shared,
        "load_average": os.getloadavg(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "inferd_src": str(options.inferd_src),
        "layouts": [layout.label for layout in options.layouts],
        "duration_s": options.duration,
        "warmup_s": options.warmup,
        "connections": options.connections,
        "load_threads": options.load_threads,
    }


def cpus() -> int:
    return os.cpu_count() or 1


def exit_status(records: Sequence[WindowRecord], failures: Sequence[str]) -> int:
    errors = sum(record.errors for record in records)
    if errors:
        print(f"FAILED: {errors} errors under load (see the errors column)", file=sys.stderr)
    if failures:
        print(f"FAILED: {len(failures)} layout(s) did not complete", file=sys.stderr)
    return 1 if failures else 2 if errors else 0
