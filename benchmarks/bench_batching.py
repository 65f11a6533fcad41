"""Adaptive batching over REST: inferd vs MLServer, both with batching on.

Both servers serve the example iris model with ``max_batch_size`` 32 and
``max_batch_time`` 0.002 s in its model-settings.json, under the same ``wrk`` load
at several connection counts (16 and 64 by default), one run after the other and
in alternating order per round, each with ``parallel_workers`` 1 (one worker
process runs the model; the main process serves HTTP). The one-connection run is the lone-request
latency: with batching on, inferd's p50 must not include max_batch_time (MLServer
waits it out).

Run from the repository root::

    /work/main/.venv/bin/python benchmarks/bench_batching.py --duration 10 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench_rest
from bench_rest import RunRecord, bench_one, command_factories, server_order, summarize
from common import ServerError

BATCHING = {"max_batch_size": 32, "max_batch_time": 0.002}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="wrk seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="wrk warm-up seconds")
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--rounds", type=int, default=2, help="order alternates between rounds")
    parser.add_argument("--parallel-workers", type=int, default=1, help="for both servers")
    parser.add_argument("--inferd-python", default="/work/main/.venv/bin/python")
    parser.add_argument("--mlserver-bin", default="/work/mlserver-venv/bin/mlserver")
    parser.add_argument("--json-out", type=Path, help="write all results as JSON")
    args = parser.parse_args(argv)
    # What bench_rest.bench_one reads.
    args.threads, args.wrk_timeout, args.ready_timeout = 1, 10.0, 120.0
    args.only, args.extra_settings = "both", {}
    return args


def with_batching(write_model_repo: Any) -> Any:
    """bench_rest's repository writer, plus the batching fields in model-settings.json."""

    def write(repo: Path, *args: Any, model_name: str, **kwargs: Any) -> Path:
        written = write_model_repo(repo, *args, model_name=model_name, **kwargs)
        settings_path = repo / model_name / "model-settings.json"
        settings = json.loads(settings_path.read_text())
        settings_path.write_text(json.dumps({**settings, **BATCHING}, indent=2) + "\n")
        return written

    return write


def run_connections(args: argparse.Namespace, work: Path, connections: int) -> list[RunRecord]:
    args.connections = connections
    factories = command_factories(args)
    records = []
    for round_index in range(args.rounds):
        for name in server_order("both", round_index):
            try:
                folder = work / f"c{connections}"
                records.append(bench_one(name, args, folder, round_index, factories[name]))
            except (ServerError, RuntimeError) as error:
                print(f"  {name} round {round_index}: FAILED: {error}", file=sys.stderr)
    return records


def print_table(results: dict[int, dict[str, dict[str, float]]]) -> None:
    print(f"\n{'conns':>5} {'server':<9}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>7}")
    for connections, summary in results.items():
        for name, row in summary.items():
            print(
                f"{connections:>5} {name:<9}{row['requests_per_s']:>10.1f}{row['p50_ms']:>9.2f}"
                f"{row['p99_ms']:>9.2f}{row['errors']:>7.0f}"
            )
        if {"inferd", "mlserver"} <= summary.keys():
            ours, theirs = summary["inferd"], summary["mlserver"]
            speedup = ours["requests_per_s"] / theirs["requests_per_s"]
            print(
                f"{'':>5} inferd/mlserver req/s x{speedup:.2f}"
                f"; inferd p99 {ours['p99_ms']:.2f} ms vs mlserver p50 {theirs['p50_ms']:.2f} ms"
            )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    bench_rest.write_model_repo = with_batching(bench_rest.write_model_repo)
    print(
        f"REST batching benchmark: {BATCHING}, connections {args.connections}, "
        f"{args.rounds} round(s) of {args.duration:g}s, parallel_workers={args.parallel_workers}"
    )
    results: dict[int, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="inferd-bench-batching-") as tmp:
        for connections in list(args.connections):
            results[connections] = summarize(run_connections(args, Path(tmp), connections))
    print_table(results)
    if args.json_out:
        args.json_out.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
