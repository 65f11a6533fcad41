"""What metrics cost: the REST benchmark with metrics on and off, in one run.

Each round runs inferd twice on the same model and load (``bench_rest.py``'s
harness: an iris LogisticRegression, ``wrk`` posting one-row FP32 requests):
once with the Prometheus endpoint on (``metrics_endpoint: /metrics``, every
REST request and model call recorded) and once with it off
(``metrics_endpoint: ""``). The order alternates between rounds. The per-model
statistics of the statistics extension are recorded either way.

Then, with no network in between (a quieter figure on a shared machine), it
calls the REST app itself in a loop, metrics on and off alternately, and times
the recording calls alone (what one request costs the hot path).

Run from the repository root::

    /work/main/.venv/bin/python benchmarks/bench_metrics.py --duration 10 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench_rest
from common import ServerError, train_iris_model, write_sklearn_model

from inferd.metrics import Sources, build_registry
from inferd.server.app import InferenceServer
from inferd.server.rest import build_rest_app
from inferd.settings import ServerSettings
from inferd.stats import HttpStats, ModelStats

VARIANTS: dict[str, dict[str, Any]] = {
    "metrics-on": {"metrics_endpoint": "/metrics"},
    "metrics-off": {"metrics_endpoint": ""},
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    # bench_rest's options (duration, connections, rounds, parallel workers, ...).
    argv = list(sys.argv[1:] if argv is None else argv)
    asgi_requests = 20_000
    if "--asgi-requests" in argv:  # ours; the rest are bench_rest's
        at = argv.index("--asgi-requests")
        asgi_requests = int(argv[at + 1])
        del argv[at : at + 2]
    args = bench_rest.parse_args(argv)
    args.only = "inferd"
    args.asgi_requests = asgi_requests
    return args


def run_variants(args: argparse.Namespace, work: Path) -> dict[str, list[float]]:
    """req/s of every run, by variant; rounds alternate which variant goes first."""
    factory = bench_rest.command_factories(args)["inferd"]
    throughput: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_index in range(args.rounds):
        names = list(VARIANTS) if round_index % 2 == 0 else list(VARIANTS)[::-1]
        for name in names:
            variant_args = copy.copy(args)
            variant_args.extra_settings = {**args.extra_settings, **VARIANTS[name]}
            print(f"  {name}:", end="")
            record = bench_rest.bench_one("inferd", variant_args, work / name, round_index, factory)
            if record.result.errors:
                raise ServerError(f"{name}: {record.result.errors} errors during the run")
            throughput[name].append(record.result.requests_per_s)
    return throughput


async def asgi_cost_us(repository: Path, metrics_on: bool, requests: int) -> float:
    """Microseconds per inference request through the REST app, called directly."""
    endpoint = "/metrics" if metrics_on else ""
    settings = ServerSettings(
        model_repository_root=str(repository), parallel_workers=0, metrics_endpoint=endpoint
    )
    server = InferenceServer(settings)
    await server.dataplane.load_all()
    if metrics_on:  # as the server does: the collector and custom-metric sink exist
        build_registry(Sources(server.dataplane.model_stats), "rest_server")
    app = build_rest_app(server.dataplane, settings, server.http_stats)
    body = json.dumps(bench_rest.REQUEST).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {"type": "http", "method": "POST", "path": "/v2/models/iris/infer", "headers": headers}
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    started = time.perf_counter()
    for _ in range(requests):
        await app(dict(scope), receive, send)
    elapsed = time.perf_counter() - started
    await server.registry.close()
    if set(statuses) != {200}:
        raise ServerError(f"the REST app answered {sorted(set(statuses))}")
    return elapsed / requests * 1e6


def asgi_comparison(rounds: int, requests: int) -> dict[str, list[float]]:
    """Per-request cost with metrics on and off, alternating, ``rounds`` times each."""
    costs: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="inferd-bench-metrics-asgi-") as tmp:
        write_sklearn_model(Path(tmp), "iris", train_iris_model())
        for round_index in range(rounds):
            names = list(VARIANTS) if round_index % 2 == 0 else list(VARIANTS)[::-1]
            for name in names:
                cost = asyncio.run(asgi_cost_us(Path(tmp), name == "metrics-on", requests))
                costs[name].append(cost)
    return costs


def recording_cost_ns(iterations: int = 200_000) -> dict[str, float]:
    """Nanoseconds per request of the recording calls the hot path makes."""
    stats = ModelStats("iris", None)
    route = HttpStats().route("POST", "/v2/models/{name}/infer")
    started = time.perf_counter_ns()
    for _ in range(iterations):
        stats.executed(1, 1)
        stats.waited(0)
        stats.computed(50_000)
        stats.succeeded(0, 80_000)
    model_ns = (time.perf_counter_ns() - started) / iterations
    started = time.perf_counter_ns()
    for _ in range(iterations):
        route.finished(200, 0.0001)
    return {"model_stats": model_ns, "rest_route": (time.perf_counter_ns() - started) / iterations}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(
        f"Metrics on vs off: {args.rounds} round(s), wrk -t{args.threads} -c{args.connections} "
        f"-d{args.duration:g}s (+{args.warmup:g}s warm-up), parallel_workers="
        f"{args.parallel_workers}"
    )
    with tempfile.TemporaryDirectory(prefix="inferd-bench-metrics-") as tmp:
        work = args.work_dir or Path(tmp)
        try:
            throughput = run_variants(args, work) if args.rounds else {}
            asgi = asgi_comparison(rounds=6, requests=args.asgi_requests)
        except (ServerError, RuntimeError) as error:
            print(f"FAILED: {error}", file=sys.stderr)
            return 1
    out: dict[str, Any] = {"wrk_req_per_s": throughput, "asgi_us_per_request": asgi}
    if throughput:
        on, off = (statistics.median(throughput[name]) for name in VARIANTS)
        # Each round's two runs are neighbours in time: their ratio cancels slow drifts.
        paired = statistics.median(
            a / b for a, b in zip(*(throughput[name] for name in VARIANTS), strict=True)
        )
        out["paired_ratio"] = paired
        print(f"\nwrk, median req/s: metrics on {on:.1f}, metrics off {off:.1f}")
        print(f"metrics on / off: x{on / off:.3f} ({(on - off) / off * 100:+.1f}% throughput)")
        print(
            f"median of the per-round on / off ratios: x{paired:.3f} ({(paired - 1) * 100:+.1f}%)"
        )
    on_us, off_us = (statistics.median(asgi[name]) for name in VARIANTS)
    print(
        f"REST app called directly, median per request: metrics on {on_us:.1f} us, "
        f"off {off_us:.1f} us ({(on_us - off_us) / off_us * 100:+.1f}% time per request)"
    )
    cost = recording_cost_ns()
    out["recording_ns"] = cost
    print(
        f"recording per request: model stats {cost['model_stats']:.0f} ns, "
        f"REST route {cost['rest_route']:.0f} ns"
    )
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
