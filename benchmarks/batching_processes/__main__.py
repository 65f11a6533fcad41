"""The command line and the round loop of ``python -m benchmarks.batching_processes``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..options import json_object
from ..results import alternate
from ..servers import CHECKOUT_SRC, Programs, resolve_source
from . import __doc__ as DESCRIPTION
from .measure import Plan, measure_layout
from .models import BATCHING, device_model, iris_model
from .report import Window, layouts, markdown_table, summarize

RUN_FAILURES = (RuntimeError, TimeoutError, OSError, ValueError)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.batching_processes",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add(
        "--replicas",
        "--processes",  # its name before the replicas replaced the protocol processes
        type=int,
        nargs="+",
        default=[2],
        help="replica counts (>= 2): servers of one protocol process, a batcher each",
    )
    add("--connections", type=int, nargs="+", default=[8, 32], help="wrk connections per load")
    add("--rounds", type=int, default=3, help="the layouts' order alternates by round")
    add("--duration", type=int, default=4, help="measured seconds per window")
    add("--warmup", type=int, default=1, help="warm-up seconds before each window")
    add("--threads", type=int, default=1, help="wrk threads")
    add("--device-ms", type=float, default=4.0, help="the device model's cost per call, ms")
    add("--device-row-ms", type=float, default=0.05, help="its added cost per row, ms")
    add(
        "--model-settings",
        type=json_object,
        default={},
        help="JSON object added to both models' model-settings.json, e.g. "
        "'{\"threads_per_worker\": 2}'",
    )
    add("--ready-timeout", type=float, default=120.0, help="server start deadline, s")
    add("--inferd-src", type=Path, default=CHECKOUT_SRC, help="the inferd sources measured")
    add("--work-dir", type=Path, help="keep repositories and logs here (default: a temp dir)")
    add("--json-out", type=Path, help="write every window and the medians as JSON")
    args = parser.parse_args(argv)
    if min(args.replicas) < 2 or min(args.connections) < 1 or args.rounds < 1:
        parser.error("--replicas must be >= 2, --connections and --rounds >= 1")
    if args.duration < 1 or args.warmup < 0:
        parser.error("--duration must be >= 1 and --warmup >= 0 (whole seconds: wrk)")
    return args


def run_rounds(
    args: argparse.Namespace, plan: Plan, folder: Path
) -> tuple[list[Window], list[str]]:
    programs = Programs(sys.executable, resolve_source(args.inferd_src))
    windows: list[Window] = []
    failures: list[str] = []
    for round_index in range(args.rounds):
        for layout in alternate(layouts(args.replicas), round_index):
            print(f"round {round_index}, {layout.label}:", flush=True)
            try:
                windows += measure_layout(layout, round_index, plan, programs, folder)
            except RUN_FAILURES as error:
                message = f"round {round_index} {layout.label}: {str(error)[-4000:]}"
                print(f"  FAILED: {message}", file=sys.stderr, flush=True)
                failures.append(message)
    return windows, failures


def report(
    args: argparse.Namespace, plan: Plan, windows: list[Window], failures: list[str]
) -> None:
    one_batcher = [layout.label for layout in layouts(args.replicas) if layout.batchers == 1]
    summary = summarize(windows)
    table = markdown_table(summary, one_batcher)
    load = os.getloadavg()
    print(f"\nmedians over {args.rounds} rounds of {args.duration} s (+{args.warmup} s warm-up); "
          f"batching {BATCHING}, model settings {plan.model_settings}; "
          f"{os.cpu_count()} CPUs shared by servers and wrk; "
          f"load average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")  # fmt: skip
    for model in plan.models:
        print(f"  {model.name}: {model.title}")
    print("\n".join(table))
    if args.json_out:
        record = {
            "argv": sys.argv[1:],
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "cpus": os.cpu_count(),
            "windows": [window.to_dict() for window in windows],
            "summary": [
                {"model": model, "connections": connections, "layout": layout, **row}
                for (model, connections), rows in summary.items()
                for layout, row in rows.items()
            ],
            "failures": failures,
            "markdown": "\n".join(table),
        }
        args.json_out.write_text(json.dumps(record, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    models = (iris_model(), device_model(args.device_ms, args.device_row_ms))
    plan = Plan(models, tuple(args.connections), args.warmup, args.duration, args.threads,
                args.device_ms, args.device_row_ms, args.ready_timeout,
                args.model_settings)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="inferd-batching-processes-") as temporary:
        windows, failures = run_rounds(args, plan, args.work_dir or Path(temporary))
    report(args, plan, windows, failures)
    errors = sum(window.errors for window in windows)
    if failures or errors:
        print(f"\nFAILED: {len(failures)} layout(s) did not complete, {errors} errors under load",
              file=sys.stderr)  # fmt: skip
    return 1 if failures else 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
