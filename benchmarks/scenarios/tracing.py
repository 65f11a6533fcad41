"""What tracing costs: inferd with OpenTelemetry tracing on (every request sampled) and off."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from ..otlp_receiver import OtlpReceiver
from ..repository import train_iris_model, write_sklearn_model
from ..results import alternate
from ..servers import BASELINE_SUFFIX, INFERD, Contender, baseline_pairs
from .base import VerificationError
from .rest import REQUEST, Rest

ON, OFF = "tracing-on", "tracing-off"
# Every span exported, none dropped: the SDK's default queue (2048 spans, sent every
# 5 s) overflows at these rates, which would understate what exporting costs.
EXPORT_ENV = {
    "OTEL_TRACES_SAMPLER": "always_on",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
    "OTEL_BSP_MAX_QUEUE_SIZE": "262144",
}


class Tracing(Rest):
    name = "tracing"
    description = """What tracing costs: the rest scenario, inferd only, tracing on vs off.

Each round runs inferd twice on the same model and load: with tracing_server set
(every request sampled: OTEL_TRACES_SAMPLER=always_on; a request span and its
queue wait, batch and predict spans, exported over OTLP/gRPC to a receiver this
process runs, which counts them) and without (OpenTelemetry is not imported).
With --baseline-src, each also runs on the baseline tree: tracing-off against
tracing-off@baseline is what the tracing code costs a server that does not trace.
Then, with no network in between, it calls the REST app itself in a loop, tracing
on and off in turn (the spans go to the same receiver)."""
    compares_mlserver = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--asgi-requests",
            type=int,
            default=10_000,
            help="requests per in-process REST app sample (0: skip)",
        )
        parser.add_argument("--asgi-rounds", type=int, default=6, help="samples per variant")

    @cached_property
    def receiver(self) -> OtlpReceiver:
        """The collector the traced servers export to, for the whole run."""
        os.environ.update(EXPORT_ENV)  # the servers inherit it
        return OtlpReceiver(keep=False).start()

    def contenders(self) -> list[Contender]:
        traced = {"tracing_server": self.receiver.endpoint}
        return [Contender(ON, INFERD, traced), Contender(OFF, INFERD, {})]

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        tree_pairs = [(ON + tree, OFF + tree) for tree in ("", BASELINE_SUFFIX)]
        return [p for p in tree_pairs if set(p) <= set(labels)] + baseline_pairs(labels)

    def measure_in_process(self) -> dict[str, Any]:
        args = self.options.args
        if not args.asgi_requests:
            return {}
        return {"asgi_us_per_request": asgi_comparison(self, args.asgi_rounds, args.asgi_requests)}

    def report_in_process(self, figures: Mapping[str, Any]) -> list[str]:
        if "asgi_us_per_request" not in figures:
            return []
        on_us, off_us = (statistics.median(v) for v in figures["asgi_us_per_request"].values())
        return [
            f"REST app called directly, median per request: tracing on {on_us:.1f} us, "
            f"off {off_us:.1f} us ({(on_us - off_us) / off_us * 100:+.1f}% time per request)"
        ]

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        return [f"spans the receiver got over the whole run: {self.receiver.count}"]


async def asgi_cost_us(repository: Path, endpoint: str | None, requests: int) -> float:
    """Microseconds per inference request through the REST app, called directly
    (wrapped as the server wraps it when tracing is on)."""
    from inferd.server.app import InferenceServer
    from inferd.settings import ServerSettings

    settings = ServerSettings(
        model_repository_root=str(repository), parallel_workers=0, tracing_server=endpoint
    )
    server = InferenceServer(settings)
    await server.dataplane.load_all()
    app: Any = server.rest_app()
    if server.tracing is not None:
        from inferd.server.traced import TracedApp

        app = TracedApp(app, server.tracing)
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
    if server.tracing is not None:
        server.tracing.shutdown(30.0)  # exported: the receiver's count shows it
    if set(statuses) != {200}:
        raise VerificationError(f"the REST app answered {sorted(set(statuses))}")
    return elapsed / requests * 1e6


def asgi_comparison(scenario: Tracing, rounds: int, requests: int) -> dict[str, list[float]]:
    """Per-request cost with tracing on and off, alternating, ``rounds`` times each."""
    costs: dict[str, list[float]] = {ON: [], OFF: []}
    endpoint = scenario.receiver.endpoint
    with tempfile.TemporaryDirectory(prefix="inferd-bench-tracing-asgi-") as tmp:
        write_sklearn_model(Path(tmp), "iris", train_iris_model())
        for round_index in range(rounds):
            for name in alternate([ON, OFF], round_index):
                traced_to = endpoint if name == ON else None
                costs[name].append(asyncio.run(asgi_cost_us(Path(tmp), traced_to, requests)))
    return costs
