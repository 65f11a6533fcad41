"""The supervisor's /metrics over real sockets: two protocol processes' registries
(observability/metrics.py), each served by uvicorn on its metrics-<i>.sock, summed
by build_metrics_app; a third process that never started is left out."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from inferd import custom_metrics
from inferd.custom_metrics import Definition
from inferd.observability.metrics import CustomMetrics, Sources, build_registry, metrics_app
from inferd.observability.stats import GrpcStats, HttpStats, ModelStatsTable
from inferd.supervisor.metrics import ANSWERED, EXPECTED, build_metrics_app
from inferd.supervisor.paths import PrivatePaths
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio

ENDPOINT = "/prometheus"
MODEL = (("model_name", "iris"), ("model_version", "1"))
INFER_ROUTE = (("method", "POST"), ("path", "/v2/models/{model_name}/infer"))


class _Uvicorn(uvicorn.Server):
    def capture_signals(self) -> Any:  # the test runner owns the signals
        return contextlib.nullcontext()


class Process:
    """What one protocol process's metrics read: its stats, its custom metrics."""

    def __init__(self) -> None:
        self.models, self.http, self.grpc = ModelStatsTable(), HttpStats(), GrpcStats()
        self.registry = build_registry(
            Sources(self.models, http=self.http, grpc=self.grpc), "rest_server"
        )
        self.custom = CustomMetrics(self.registry)

    def serve(self, requests: int, failures: int, tokens: float) -> None:
        """Count ``requests`` answered (``failures`` of them failed) as the server does."""
        stats = self.models.of("iris", "1")
        for index in range(requests):
            now = time.perf_counter_ns()
            if index < failures:
                stats.failed(now - 1_000_000, now)
            else:
                stats.succeeded(now - 3_000_000, now)
            stats.executed(rows=1, requests=1)
            status = 500 if index < failures else 200
            self.http.route("POST", "/v2/models/{model_name}/infer").finished(status, 0.003)
            method = self.grpc.method("inference.GRPCInferenceService", "ModelInfer")
            method.started += 1
            method.finished("OK", 0.002)
        self.custom.apply(
            [Definition("tokens_generated", "counter", "Tokens")],
            [("tokens_generated", ("iris", "1"), tokens)],
        )


@pytest.fixture(autouse=True)
def fresh_custom_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(custom_metrics, "_state", custom_metrics._State())


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[tuple[PrivatePaths, list[Process]]]:
    """Two processes' metrics apps on metrics-0.sock and metrics-1.sock; none on 2."""
    paths = PrivatePaths(tmp_path)
    processes = [Process(), Process()]
    servers, tasks = [], []
    for index, process in enumerate(processes):
        config = uvicorn.Config(
            metrics_app(process.registry, ENDPOINT),
            uds=str(paths.metrics(index)),
            lifespan="off",
            log_config=None,
        )
        servers.append(_Uvicorn(config))
        tasks.append(asyncio.create_task(servers[-1].serve()))
    for server, task in zip(servers, tasks, strict=True):
        await wait_for_async(lambda s=server, t=task: s.started or t.done(), "uvicorn to start")
    yield paths, processes
    for server in servers:
        server.should_exit = True
    await asyncio.gather(*tasks)


async def scrape(paths: PrivatePaths, count: int, **headers: str) -> httpx.Response:
    app = build_metrics_app(paths, count, ENDPOINT)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://supervisor") as client:
        return await client.get(ENDPOINT, headers=headers)


def samples(metrics: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in metrics
        for sample in metric.samples
    }


async def test_one_scrape_gives_the_totals_of_every_process(
    processes: tuple[PrivatePaths, list[Process]],
) -> None:
    paths, (first, second) = processes
    first.serve(requests=7, failures=2, tokens=40)
    second.serve(requests=5, failures=1, tokens=2)
    response = await scrape(paths, 3)  # process 2 never started
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = samples(parse_text(response.text))
    assert found[("model_infer_request_success_total", MODEL)] == 5 + 4
    assert found[("model_infer_request_failure_total", MODEL)] == 2 + 1
    assert found[("model_infer_request_duration_count", MODEL)] == 12
    assert found[("model_infer_batch_size_bucket", (("le", "1.0"), *MODEL))] == 12
    assert found[("rest_server_requests_total", (*INFER_ROUTE, ("status_code", "200")))] == 9
    assert found[("rest_server_requests_total", (*INFER_ROUTE, ("status_code", "500")))] == 3
    grpc = (("grpc_method", "ModelInfer"), ("grpc_service", "inference.GRPCInferenceService"))
    assert found[("grpc_server_started_total", (*grpc, ("grpc_type", "unary")))] == 12
    assert found[("tokens_generated_total", MODEL)] == 42
    assert found[("loaded_models", ())] == 0
    assert (found[(ANSWERED, ())], found[(EXPECTED, ())]) == (2, 3)


async def test_openmetrics_gzip_and_name_filter_are_negotiated_as_one_server_does(
    processes: tuple[PrivatePaths, list[Process]],
) -> None:
    paths, (first, second) = processes
    first.serve(requests=3, failures=0, tokens=1)
    second.serve(requests=2, failures=0, tokens=1)
    response = await scrape(paths, 2, accept="application/openmetrics-text; version=1.0.0")
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    found = samples(parse_openmetrics(response.text))
    assert found[("model_infer_request_success_total", MODEL)] == 5
    assert ("tokens_generated_created", MODEL) in found  # in its counter's family
    assert (found[(ANSWERED, ())], found[(EXPECTED, ())]) == (2, 2)

    app = build_metrics_app(paths, 2, ENDPOINT)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://supervisor") as client:
        zipped = await client.get(
            ENDPOINT + "?name[]=model_infer_request_success_total",
            headers={"accept-encoding": "gzip"},
        )
    assert zipped.headers["content-encoding"] == "gzip"
    # httpx has unzipped it
    assert samples(parse_text(zipped.text)) == {("model_infer_request_success_total", MODEL): 5}
