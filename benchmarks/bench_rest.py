"""REST (V2 / Open Inference Protocol) throughput+latency: inferd vs MLServer.

Both servers get the same model repository layout (``settings.json`` plus an
``mlserver_sklearn.SKLearnModel`` folder) and the same ``wrk`` load. Each round
runs every selected server once; the order alternates between rounds (A B, B A,
...) so slow drifts in machine noise hit both sides.

Run from the repository root::

    /work/main/.venv/bin/python benchmarks/bench_rest.py --duration 10 --connections 16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from common import (
    MODEL_FILE,
    ServerError,
    ServerPorts,
    ServerProcess,
    WrkResult,
    exit_status,
    post_json,
    run_wrk,
    train_iris_model,
    write_model_repo,
)

MODEL_NAME = "iris"
ROW = [5.1, 3.5, 1.4, 0.2]
REQUEST: dict[str, Any] = {
    "inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": ROW}]
}
SERVERS = ("inferd", "mlserver")
CommandFactory = Callable[[Path], list[str]]


@dataclass
class RunRecord:
    server: str
    round: int
    startup_s: float
    result: WrkResult

    def to_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "round": self.round,
            "startup_s": self.startup_s,
            **self.result.to_dict(),
        }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=10.0, help="wrk seconds per run")
    p.add_argument("--warmup", type=float, default=3.0, help="wrk warm-up seconds (discarded)")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--rounds", type=int, default=2, help="order alternates between rounds")
    p.add_argument("--wrk-timeout", type=float, default=10.0, help="wrk per-request timeout s")
    p.add_argument("--ready-timeout", type=float, default=120.0, help="server start deadline s")
    p.add_argument("--inferd-python", default="/work/main/.venv/bin/python")
    p.add_argument("--mlserver-bin", default="/work/mlserver-venv/bin/mlserver")
    p.add_argument("--only", choices=("inferd", "mlserver", "both"), default="both")
    p.add_argument("--parallel-workers", type=int, default=0)
    p.add_argument(
        "--extra-settings",
        type=json.loads,
        default={},
        help="JSON merged into settings.json, e.g. '{\"debug\": false}'",
    )
    p.add_argument("--work-dir", type=Path, help="keep repos/logs here (default: temp dir)")
    p.add_argument("--json-out", type=Path, help="write all results as JSON")
    args = p.parse_args(argv)
    if not isinstance(args.extra_settings, dict):
        p.error("--extra-settings must be a JSON object")
    return args


def command_factories(args: argparse.Namespace) -> dict[str, CommandFactory]:
    return {
        "inferd": lambda repo: [args.inferd_python, "-m", "inferd", "start", str(repo)],
        "mlserver": lambda repo: [args.mlserver_bin, "start", str(repo)],
    }


def server_order(only: str, round_index: int) -> list[str]:
    names = list(SERVERS) if only == "both" else [only]
    return names if round_index % 2 == 0 else names[::-1]


def expected_prediction(model_path: Path) -> int:
    model = joblib.load(model_path)
    return int(model.predict(np.asarray([ROW], dtype=np.float32))[0])


def verify_response(url: str, expected: int) -> None:
    """One request before load: status 200, an output present, right class."""
    status, body = post_json(url, REQUEST)
    if status != 200:
        raise ServerError(f"verification POST {url} -> HTTP {status}: {body}")
    outputs = body.get("outputs") if isinstance(body, dict) else None
    if not outputs or "data" not in outputs[0]:
        raise ServerError(f"verification POST {url}: no outputs in {body}")
    data = np.asarray(outputs[0]["data"]).ravel()
    if data.size != 1 or int(data[0]) != expected:
        raise ServerError(f"verification POST {url}: expected [{expected}], got {outputs[0]}")


def prepare_repo(
    name: str, args: argparse.Namespace, work: Path, round_index: int
) -> tuple[ServerPorts, Path]:
    """Free ports and a fresh repository (settings + the iris model) for one run."""
    ports = ServerPorts.allocate()
    repo = work / f"{name}-r{round_index}"
    write_model_repo(
        repo,
        ports,
        model_name=MODEL_NAME,
        parallel_workers=args.parallel_workers,
        extra_settings=args.extra_settings,
        model=train_iris_model(),
    )
    return ports, repo


def bench_one(
    name: str, args: argparse.Namespace, work: Path, round_index: int, factory: CommandFactory
) -> RunRecord:
    ports, repo = prepare_repo(name, args, work, round_index)
    base = f"http://127.0.0.1:{ports.http}"
    url = f"{base}/v2/models/{MODEL_NAME}/infer"
    body = json.dumps(REQUEST)
    server = ServerProcess(factory(repo), cwd=repo, log_path=repo / "server.log")
    try:
        server.start()
        startup = server.wait_ready(base, timeout_s=args.ready_timeout)
        verify_response(url, expected_prediction(repo / MODEL_NAME / MODEL_FILE))
        wrk_kw = {"connections": args.connections, "threads": args.threads}
        if args.warmup > 0:
            warm = run_wrk(url, body, duration_s=args.warmup, timeout_s=args.wrk_timeout, **wrk_kw)
            report_errors(f"{name} warm-up", warm)
        result = run_wrk(url, body, duration_s=args.duration, timeout_s=args.wrk_timeout, **wrk_kw)
    finally:
        server.stop()
    print(f"  {name:<8} round {round_index}: {format_row(result)}  (ready in {startup:.1f}s)")
    report_errors(name, result)
    return RunRecord(name, round_index, startup, result)


def report_errors(label: str, result: WrkResult) -> None:
    if result.errors:
        print(
            f"  WARNING {label}: {result.non2xx} non-2xx responses, "
            f"socket errors {result.socket_errors}",
            file=sys.stderr,
        )


def format_row(r: WrkResult) -> str:
    return (
        f"{r.requests_per_s:9.1f} req/s  p50 {r.p50_ms:7.2f} ms  "
        f"p99 {r.p99_ms:7.2f} ms  errors {r.errors}"
    )


def summarize(
    records: list[RunRecord], names: Sequence[str] = SERVERS
) -> dict[str, dict[str, float]]:
    """Median over rounds per server (errors are summed)."""
    summary: dict[str, dict[str, float]] = {}
    for name in names:
        runs = [r.result for r in records if r.server == name]
        if not runs:
            continue
        summary[name] = {
            "runs": len(runs),
            "requests_per_s": statistics.median(r.requests_per_s for r in runs),
            "p50_ms": statistics.median(r.p50_ms for r in runs),
            "p99_ms": statistics.median(r.p99_ms for r in runs),
            "errors": sum(r.errors for r in runs),
        }
    return summary


def ratios(summary: dict[str, dict[str, float]]) -> dict[str, float] | None:
    if not {"inferd", "mlserver"} <= summary.keys():
        return None
    a, b = summary["inferd"], summary["mlserver"]
    return {
        "requests_per_s": a["requests_per_s"] / b["requests_per_s"],
        "p99_ms": a["p99_ms"] / b["p99_ms"],
    }


def print_summary(summary: dict[str, dict[str, float]], ratio: dict[str, float] | None) -> None:
    print(f"\n{'server':<9}{'runs':>5}{'req/s':>11}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    for name, s in summary.items():
        print(
            f"{name:<9}{s['runs']:>5.0f}{s['requests_per_s']:>11.1f}"
            f"{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}{s['errors']:>8.0f}"
        )
    if ratio:
        print(
            f"\ninferd/mlserver: req/s x{ratio['requests_per_s']:.2f} (higher is better), "
            f"p99 x{ratio['p99_ms']:.2f} (lower is better)"
        )


def describe_setup(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "connections": args.connections,
        "threads": args.threads,
        "rounds": args.rounds,
        "parallel_workers": args.parallel_workers,
        "extra_settings": args.extra_settings,
        "request": REQUEST,
        "note": "server and wrk share all CPUs; nothing is pinned",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run_all(args: argparse.Namespace, work: Path) -> tuple[list[RunRecord], list[str]]:
    """Run every round; a server that fails is reported and the others go on."""
    factories = command_factories(args)
    records: list[RunRecord] = []
    failures: list[str] = []
    for round_index in range(args.rounds):
        for name in server_order(args.only, round_index):
            try:
                records.append(bench_one(name, args, work, round_index, factories[name]))
            except (ServerError, RuntimeError) as exc:
                print(f"  {name:<8} round {round_index}: FAILED: {exc}", file=sys.stderr)
                failures.append(f"{name} round {round_index}: {exc}")
    return records, failures


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    setup = describe_setup(args)
    print(
        f"REST V2 benchmark: {args.only}, {args.rounds} round(s), wrk -t{args.threads} "
        f"-c{args.connections} -d{args.duration:g}s (+{args.warmup:g}s warm-up), "
        f"parallel_workers={args.parallel_workers}, extra settings={args.extra_settings}\n"
        f"NOTE: {setup['cpus']} CPUs shared by server and wrk; nothing pinned."
    )
    with tempfile.TemporaryDirectory(prefix="inferd-bench-") as tmp:
        work = args.work_dir or Path(tmp)
        records, failures = run_all(args, work)
    summary = summarize(records)
    ratio = ratios(summary)
    print_summary(summary, ratio)
    if args.json_out:
        out: dict[str, Any] = {"setup": setup, "runs": [r.to_dict() for r in records]}
        out["failures"] = failures
        out |= {"summary": summary, "ratio_inferd_over_mlserver": ratio}
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return exit_status(sum(r.result.errors for r in records), len(failures))


if __name__ == "__main__":
    sys.exit(main())
