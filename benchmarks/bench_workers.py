"""Inference in worker processes: inferd vs MLServer, and the IPC round trip.

Two parts, in one run:

1. The IPC round trip: main -> worker -> main for a no-op model and a small
   request (one FP32 [1, 4] tensor), timed call by call through inferd's
   process pool (``ProcessPool.predict``), against the in-process pool.
2. REST throughput and latency (``wrk``, as in bench_rest.py) for each model
   (a CPU-bound model of about 1 ms of pure Python per call, and the example
   scikit-learn iris model), each server (inferd, MLServer 1.7.1) and each
   ``parallel_workers`` value (default 1 and 2). Rounds alternate the order.

Run from the repository root::

    /work/main/.venv/bin/python benchmarks/bench_workers.py --duration 8 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bench_rest import command_factories, format_row, report_errors
from common import (
    ServerError,
    ServerPorts,
    ServerProcess,
    WrkResult,
    post_json,
    run_wrk,
    train_iris_model,
    write_settings,
    write_sklearn_model,
)

SERVERS = ("inferd", "mlserver")
MODELS = ("busy", "iris")
ROW = [5.1, 3.5, 1.4, 0.2]
BUSY_MS = 1.0

# Both servers' runtime classes in one module, copied into the model's folder.
BUSY_MODULE = '''\
"""A CPU-bound model: a pure-Python loop of about {ms} ms per call, then y = 2x."""

ITERATIONS = {iterations}


def spin(iterations=ITERATIONS):
    total = 0
    for i in range(iterations):
        total += i * i
    return total


try:
    from inferd import InferenceResponse, Model, Tensor

    class BusyInferd(Model):
        def predict(self, request):
            x = request.inputs[0].data
            spin()
            return InferenceResponse(outputs=[Tensor("y", x * 2)])

except ImportError:
    pass

try:
    from mlserver import MLModel
    from mlserver.codecs import NumpyCodec
    from mlserver.types import InferenceResponse as MLServerResponse

    class BusyMLServer(MLModel):
        async def predict(self, payload):
            x = NumpyCodec.decode_input(payload.inputs[0])
            spin()
            return MLServerResponse(
                model_name=self.name, outputs=[NumpyCodec.encode_output("y", x * 2)]
            )

except ImportError:
    pass
'''


@dataclass
class Run:
    model: str
    server: str
    workers: int
    round: int
    result: WrkResult

    @property
    def label(self) -> str:
        return f"{self.server} pw={self.workers}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=8.0, help="wrk seconds per run")
    p.add_argument("--warmup", type=float, default=2.0, help="wrk warm-up seconds (discarded)")
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--rounds", type=int, default=1, help="order alternates between rounds")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="parallel_workers")
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    p.add_argument("--only", choices=("inferd", "mlserver", "both"), default="both")
    p.add_argument("--ipc-calls", type=int, default=5000, help="calls per IPC sample (0: skip)")
    p.add_argument("--wrk-timeout", type=float, default=10.0)
    p.add_argument("--ready-timeout", type=float, default=120.0)
    p.add_argument("--inferd-python", default="/work/main/.venv/bin/python")
    p.add_argument("--mlserver-bin", default="/work/mlserver-venv/bin/mlserver")
    p.add_argument("--work-dir", type=Path, help="keep repos/logs here (default: temp dir)")
    p.add_argument("--json-out", type=Path)
    return p.parse_args(argv)


# ----------------------------------------------------------------- IPC round trip


def calibrate_busy(target_ms: float = BUSY_MS) -> tuple[int, float]:
    """Loop iterations that take ``target_ms`` here, and the measured ms per call."""
    namespace: dict[str, Any] = {}
    exec(BUSY_MODULE.format(ms=target_ms, iterations=100_000), namespace)
    spin = namespace["spin"]
    spin(100_000)
    started = time.perf_counter()
    spin(100_000)
    iterations = int(100_000 * target_ms / ((time.perf_counter() - started) * 1e3))
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        spin(iterations)
        timings.append((time.perf_counter() - started) * 1e3)
    return iterations, statistics.median(timings)


async def time_pool(pool: Any, calls: int, samples: int = 5) -> dict[str, float]:
    """p50 and mean of ``pool.predict`` for a small request, median over ``samples``."""
    from inferd.settings_loader import model_settings_from_dict
    from inferd.types import InferenceRequest, Tensor

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "noop.py").write_text(
            "from inferd import InferenceResponse, Model\n"
            "class NoOp(Model):\n"
            "    def predict(self, request):\n"
            "        return InferenceResponse(outputs=request.inputs)\n"
        )
        source = Path(folder) / "model-settings.json"
        settings = model_settings_from_dict({"name": "noop", "implementation": "noop.NoOp"}, source)
        await pool.start()
        await pool.load(1, settings)
    request = InferenceRequest([Tensor("x", np.array([ROW], dtype=np.float32))])
    for _ in range(min(calls, 2000)):
        await pool.predict(1, request)
    medians, means = [], []
    for _ in range(samples):
        timings = []
        for _ in range(calls):
            started = time.perf_counter_ns()
            await pool.predict(1, request)
            timings.append(time.perf_counter_ns() - started)
        medians.append(statistics.median(timings) / 1e3)
        means.append(statistics.fmean(timings) / 1e3)
    large = InferenceRequest([Tensor("x", np.zeros((1024, 1024), dtype=np.float32))])
    started = time.perf_counter()
    for _ in range(20):
        await pool.predict(1, large)
    large_ms = (time.perf_counter() - started) / 20 * 1e3
    await pool.unload(1)
    await pool.close()
    return {
        "p50_us": statistics.median(medians),
        "mean_us": statistics.median(means),
        "large_ms": large_ms,
    }


def measure_ipc(calls: int) -> dict[str, dict[str, float]]:
    import uvloop

    from inferd.settings import ServerSettings
    from inferd.workers.inprocess import InProcessPool
    from inferd.workers.pool import ProcessPool

    process_pool = ProcessPool(ServerSettings(parallel_workers=1))
    return {
        "worker process": uvloop.run(time_pool(process_pool, calls)),
        "in-process": uvloop.run(time_pool(InProcessPool(), calls)),
    }


# ------------------------------------------------------------------------ REST


def write_repository(repo: Path, model: str, server: str, iterations: int) -> dict[str, Any]:
    """The model's folder; returns the request body to send."""
    if model == "iris":
        write_sklearn_model(repo, "iris", train_iris_model())
        return {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": ROW}]}
    folder = repo / "busy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "busy.py").write_text(BUSY_MODULE.format(ms=BUSY_MS, iterations=iterations))
    implementation = "busy.BusyInferd" if server == "inferd" else "busy.BusyMLServer"
    settings = {"name": "busy", "implementation": implementation}
    (folder / "model-settings.json").write_text(json.dumps(settings))
    return {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": ROW}]}


def verify(url: str, model: str, body: dict[str, Any]) -> None:
    status, answer = post_json(url, body)
    if status != 200 or not isinstance(answer, dict) or not answer.get("outputs"):
        raise ServerError(f"verification POST {url} -> HTTP {status}: {answer}")
    data = np.asarray(answer["outputs"][0]["data"], dtype=float).ravel()
    expected = [2 * v for v in ROW] if model == "busy" else None
    if expected is not None and not np.allclose(data, expected):
        raise ServerError(f"verification POST {url}: expected {expected}, got {data}")


def bench_one(
    args: argparse.Namespace, work: Path, model: str, server: str, workers: int, index: int
) -> Run:
    ports = ServerPorts.allocate()
    repo = work / f"{model}-{server}-pw{workers}-r{index}"
    repo.mkdir(parents=True)
    write_settings(repo, ports, workers, {"debug": False})
    body = write_repository(repo, model, server, args.iterations)
    url = f"http://127.0.0.1:{ports.http}/v2/models/{model}/infer"
    command = command_factories(args)[server](repo)
    process = ServerProcess(command, cwd=repo, log_path=repo / "server.log")
    try:
        process.start()
        process.wait_ready(f"http://127.0.0.1:{ports.http}", timeout_s=args.ready_timeout)
        verify(url, model, body)
        wrk = {"connections": args.connections, "threads": args.threads}
        if args.warmup > 0:
            warm = run_wrk(url, json.dumps(body), duration_s=args.warmup, **wrk)
            report_errors(f"{server} warm-up", warm)
        result = run_wrk(
            url, json.dumps(body), duration_s=args.duration, timeout_s=args.wrk_timeout, **wrk
        )
    finally:
        process.stop()
    run = Run(model, server, workers, index, result)
    print(f"  {model:<5} {run.label:<14} round {index}: {format_row(result)}")
    report_errors(run.label, result)
    return run


def run_all(args: argparse.Namespace, work: Path) -> tuple[list[Run], list[str]]:
    servers = list(SERVERS) if args.only == "both" else [args.only]
    configs = [(s, w) for s in servers for w in args.workers]
    runs, failures = [], []
    for index in range(args.rounds):
        order = configs if index % 2 == 0 else configs[::-1]
        for model in args.models:
            for server, workers in order:
                try:
                    runs.append(bench_one(args, work, model, server, workers, index))
                except (ServerError, RuntimeError) as error:
                    print(f"  {model} {server} pw={workers}: FAILED: {error}", file=sys.stderr)
                    failures.append(f"{model} {server} pw={workers} round {index}: {error}")
    return runs, failures


def summarize(runs: list[Run]) -> list[dict[str, Any]]:
    rows = []
    for key in dict.fromkeys((r.model, r.server, r.workers) for r in runs):
        results = [r.result for r in runs if (r.model, r.server, r.workers) == key]
        model, server, workers = key
        rows.append(
            {
                "model": model,
                "server": server,
                "workers": workers,
                "runs": len(results),
                "requests_per_s": statistics.median(r.requests_per_s for r in results),
                "p50_ms": statistics.median(r.p50_ms for r in results),
                "p99_ms": statistics.median(r.p99_ms for r in results),
                "errors": sum(r.errors for r in results),
            }
        )
    return rows


def print_summary(rows: list[dict[str, Any]]) -> None:
    header = f"{'model':<6}{'server':<10}{'pw':>3}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
    print(f"\n{header}{'errors':>8}{'vs mlserver pw=1':>18}")
    baselines = {r["model"]: r for r in rows if (r["server"], r["workers"]) == ("mlserver", 1)}
    for row in rows:
        base = baselines.get(row["model"])
        ratio = f"x{row['requests_per_s'] / base['requests_per_s']:.2f}" if base else ""
        print(
            f"{row['model']:<6}{row['server']:<10}{row['workers']:>3}"
            f"{row['requests_per_s']:>10.1f}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}"
            f"{row['errors']:>8}{ratio:>18}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.iterations, busy_ms = calibrate_busy()
    print(f"CPU-bound model: {args.iterations} loop iterations = {busy_ms:.2f} ms per call here")
    ipc = measure_ipc(args.ipc_calls) if args.ipc_calls else {}
    for where, timing in ipc.items():
        print(
            f"IPC round trip, {where:<14}: p50 {timing['p50_us']:6.1f} us, mean "
            f"{timing['mean_us']:6.1f} us (no-op model, one FP32 [1,4] tensor); 4 MiB tensor "
            f"both ways: {timing['large_ms']:.2f} ms"
        )
    print(
        f"REST: wrk -t{args.threads} -c{args.connections} -d{args.duration:g}s "
        f"(+{args.warmup:g}s warm-up), {args.rounds} round(s); server and wrk share the CPUs"
    )
    with tempfile.TemporaryDirectory(prefix="inferd-bench-workers-") as tmp:
        work = args.work_dir or Path(tmp)
        runs, failures = run_all(args, work)
    rows = summarize(runs)
    print_summary(rows)
    if args.json_out:
        out = {"busy_ms": busy_ms, "iterations": args.iterations, "ipc": ipc}
        out |= {"summary": rows, "failures": failures}
        out["args"] = {key: str(value) for key, value in vars(args).items()}
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    errors = sum(row["errors"] for row in rows)
    return 1 if failures else 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
