"""What metrics cost: inferd with the Prometheus endpoint on and off, in one run."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.models import train_iris

from ..repository import write_sklearn_model
from ..results import alternate
from ..servers import BASELINE_SUFFIX, INFERD, Contender, baseline_pairs
from .base import VerificationError
from .rest import REQUEST, Rest, add_asgi_arguments

VARIANTS: dict[str, dict[str, Any]] = {
    "metrics-on": {"metrics_endpoint": "/metrics"},
    "metrics-off": {"metrics_endpoint": ""},
}


class Metrics(Rest):
    name = "metrics"
    description = """What metrics cost: the rest scenario, inferd only, metrics on vs off.

Each round runs inferd twice on the same model and load: with the Prometheus
endpoint on (metrics_endpoint "/metrics": every REST request and model call
recorded) and off (metrics_endpoint ""). The per-model statistics are recorded
either way. Then, with no network in between (a quieter figure on a shared
machine), it calls the REST app itself in a loop, metrics on and off in turn,
and times the recording calls alone (what one request costs the hot path)."""
    compares_mlserver = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_asgi_arguments(parser, requests=20_000)

    def contenders(self) -> list[Contender]:
        return [Contender(name, INFERD, settings) for name, settings in VARIANTS.items()]

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        on, off = VARIANTS
        tree_pairs = [(on + tree, off + tree) for tree in ("", BASELINE_SUFFIX)]
        return [p for p in tree_pairs if set(p) <= set(labels)] + baseline_pairs(labels)

    def measure_in_process(self) -> dict[str, Any]:
        args = self.options.args
        figures: dict[str, Any] = {"recording_ns": recording_cost_ns()}
        if args.asgi_requests:
            figures["asgi_us_per_request"] = asgi_comparison(args.asgi_rounds, args.asgi_requests)
        return figures

    def report_in_process(self, figures: Mapping[str, Any]) -> list[str]:
        cost = figures["recording_ns"]
        lines = [
            f"recording per request: model stats {cost['model_stats']:.0f} ns, "
            f"REST route {cost['rest_route']:.0f} ns"
        ]
        if "asgi_us_per_request" in figures:
            on_us, off_us = (statistics.median(v) for v in figures["asgi_us_per_request"].values())
            lines.append(
                f"REST app called directly, median per request: metrics on {on_us:.1f} us, "
                f"off {off_us:.1f} us ({(on_us - off_us) / off_us * 100:+.1f}% time per request)"
            )
        return lines


async def asgi_cost_us(repository: Path, metrics_on: bool, requests: int) -> float:
    """Microseconds per inference request through the REST app, called directly."""
    from inferd.observability.metrics import Sources, build_registry
    from inferd.server.app import InferenceServer
    from inferd.server.rest.api import build_rest_app
    from inferd.settings import ServerSettings

    endpoint = "/metrics" if metrics_on else ""
    settings = ServerSettings(
        model_repository_root=str(repository), parallel_workers=0, metrics_endpoint=endpoint
    )
    server = InferenceServer(settings)
    await server.dataplane.load_all()
    if metrics_on:  # as the server does: the collector and custom-metric sink exist
        build_registry(Sources(server.dataplane.model_stats), "rest_server")
    app = build_rest_app(server.dataplane, settings, server.http_stats)
    body = json.dumps(REQUEST).encode()
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
        raise VerificationError(f"the REST app answered {sorted(set(statuses))}")
    return elapsed / requests * 1e6


def asgi_comparison(rounds: int, requests: int) -> dict[str, list[float]]:
    """Per-request cost with metrics on and off, alternating, ``rounds`` times each."""
    costs: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="inferd-bench-metrics-asgi-") as tmp:
        write_sklearn_model(Path(tmp), "iris", train_iris())
        for round_index in range(rounds):
            for name in alternate(list(VARIANTS), round_index):
                cost = asyncio.run(asgi_cost_us(Path(tmp), name == "metrics-on", requests))
                costs[name].append(cost)
    return costs


def recording_cost_ns(iterations: int = 200_000) -> dict[str, float]:
    """Nanoseconds per request of the recording calls the hot path makes."""
    from inferd.observability.stats import HttpStats, ModelStats

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
