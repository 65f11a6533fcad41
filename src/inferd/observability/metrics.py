"""Every Prometheus metric the server exports, in one registry, in the main process.

The hot path records into the plain counters of :mod:`inferd.observability.stats`; the
collector here turns them into Prometheus metric families when the endpoint is scraped
(on the event loop thread, like the recording: no locks). Runtimes' custom metrics
(:mod:`inferd.custom_metrics`) are prometheus_client metrics in the same registry.

Labels, one scheme throughout: ``model_name`` and ``model_version`` ("" for an unversioned
model) on every per-model metric; ``method``, ``path`` (the route template, never the raw
path) and ``status_code`` on REST metrics; the py-grpc-prometheus labels (``grpc_type``,
``grpc_service``, ``grpc_method``, ``grpc_code``) on gRPC metrics; ``worker`` on workers'.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from inferd import custom_metrics
from inferd.observability import gpu_metrics
from inferd.observability.custom import CustomMetrics
from inferd.observability.plain_counters import exposition_app
from inferd.observability.stats import GrpcStats, HttpStats, ModelStatsTable
from inferd.observability.stats import Histogram as StatsHistogram
from inferd.observability.token_metrics import token_families
from inferd.types import ModelState

logger = logging.getLogger(__name__)

MODEL_LABELS = ("model_name", "model_version")
GRPC_LABELS = ("grpc_type", "grpc_service", "grpc_method")


class SchedulerSource(Protocol):
    """What the collector reads of a model version's scheduler."""

    @property
    def waiting(self) -> int: ...

    @property
    def in_flight(self) -> int: ...


class ModelVersionSource(Protocol):
    """What the collector reads of a model version in the registry."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str | None: ...

    @property
    def state(self) -> ModelState: ...

    @property
    def load_seconds(self) -> float: ...

    @property
    def scheduler(self) -> SchedulerSource | None: ...


class WorkerSource(Protocol):
    """What the collector reads of a worker process."""

    @property
    def index(self) -> int: ...

    @property
    def busy_seconds(self) -> float: ...

    @property
    def restarts(self) -> int: ...


@dataclass
class Sources:
    """Where the collector finds the numbers; any of them may be absent."""

    models: ModelStatsTable
    versions: Callable[[], Iterable[ModelVersionSource]] = list
    workers: Callable[[], Iterable[WorkerSource]] = list
    http: HttpStats | None = None
    grpc: GrpcStats | None = None


class ServerCollector(Collector):
    """The server's own metrics, built from :mod:`inferd.observability.stats` at scrape time."""

    def __init__(self, sources: Sources, rest_prefix: str = "rest_server") -> None:
        self.sources = sources
        self.rest_prefix = rest_prefix

    def describe(self) -> Iterable[Metric]:
        # Every name, so the registry refuses a custom metric that would clash.
        return [*self._families(Sources(ModelStatsTable()))]

    def collect(self) -> Iterable[Metric]:
        return self._families(self.sources)

    def _families(self, sources: Sources) -> Iterator[Metric]:
        versions = list(sources.versions())
        for version in versions:  # loaded models show from zero, before their first request
            sources.models.of(version.name, version.version)
        yield from _model_families(sources.models)
        yield from token_families(sources.models)
        yield from _registry_families(versions)
        yield from _worker_families(sources.workers())
        yield from _rest_families(self.rest_prefix, sources.http or HttpStats())
        yield from _grpc_families(sources.grpc or GrpcStats())


def _model_families(models: ModelStatsTable) -> Iterator[Metric]:
    success = CounterMetricFamily(
        "model_infer_request_success", "Inference requests that succeeded", labels=MODEL_LABELS
    )
    failure = CounterMetricFamily(
        "model_infer_request_failure", "Inference requests that failed", labels=MODEL_LABELS
    )
    histograms = {
        "duration": HistogramMetricFamily(
            "model_infer_request_duration",
            "Inference request duration in seconds, from arrival to answer",
            labels=MODEL_LABELS,
        ),
        "queue_wait": HistogramMetricFamily(
            "model_infer_queue_duration_seconds",
            "Time a successful request waited for a free worker slot",
            labels=MODEL_LABELS,
        ),
        "batch_size": HistogramMetricFamily(
            "model_infer_batch_size",
            "Rows in each execution of the model (a batch of merged requests, or one)",
            labels=MODEL_LABELS,
        ),
        "first_response": HistogramMetricFamily(
            "model_stream_first_response_seconds",
            "Time from a stream's arrival to its first response",
            labels=MODEL_LABELS,
        ),
        "stream_responses": HistogramMetricFamily(
            "model_stream_responses",
            "Responses each stream sent before it ended",
            labels=MODEL_LABELS,
        ),
        "load": HistogramMetricFamily(
            "model_load_seconds",
            "Seconds each load of the model version took (at the start, through the "
            "repository API, on request, by the repository poller)",
            labels=MODEL_LABELS,
        ),
    }
    streams = GaugeMetricFamily(
        "model_streams_in_flight", "Streams of the model open now", labels=MODEL_LABELS
    )
    timeouts = CounterMetricFamily(
        "model_inference_timeouts",
        "Calls of the model that ran past its inference_timeout (their worker was killed)",
        labels=MODEL_LABELS,
    )
    cache_hits = CounterMetricFamily(
        "model_cache_hits", "Requests answered from the response cache", labels=MODEL_LABELS
    )
    cache_misses = CounterMetricFamily(
        "model_cache_misses",
        "Requests looked up in the response cache and not found",
        labels=MODEL_LABELS,
    )
    for stats in models:
        labels = (stats.name, stats.version)
        cache_hits.add_metric(labels, stats.cache_hit_count)
        cache_misses.add_metric(labels, stats.cache_miss_count)
        success.add_metric(labels, stats.success_count)
        failure.add_metric(labels, stats.fail_count)
        timeouts.add_metric(labels, stats.timeouts)
        streams.add_metric(labels, stats.streams_open)
        for attribute, family in histograms.items():
            _add_histogram(family, labels, getattr(stats, attribute))
    yield success
    yield failure
    yield timeouts
    yield cache_hits
    yield cache_misses
    yield streams
    yield from histograms.values()


def _registry_families(versions: Iterable[ModelVersionSource]) -> Iterator[Metric]:
    loaded = GaugeMetricFamily("loaded_models", "Model versions loaded and ready to serve")
    load_time = GaugeMetricFamily(
        "model_load_duration_seconds",
        "How long the latest load of each loaded model version took",
        labels=MODEL_LABELS,
    )
    queued = GaugeMetricFamily(
        "batch_request_queue",
        "Requests waiting in the model's queue for a worker slot (and a batch)",
        labels=MODEL_LABELS,
    )
    running = GaugeMetricFamily(
        "parallel_request_queue",
        "Batches of the model sent to workers and not answered yet (running or about to)",
        labels=MODEL_LABELS,
    )
    ready = 0
    for version in versions:
        if version.state is not ModelState.READY:
            continue
        ready += 1
        labels = (version.name, version.version or "")
        load_time.add_metric(labels, version.load_seconds)
        scheduler = version.scheduler
        if scheduler is not None:  # dispatched here (a hosted version's queue is the host's)
            queued.add_metric(labels, scheduler.waiting)
            running.add_metric(labels, scheduler.in_flight)
    loaded.add_metric((), ready)
    yield loaded
    yield load_time
    yield queued
    yield running


def _worker_families(workers: Iterable[WorkerSource]) -> Iterator[Metric]:
    busy = CounterMetricFamily(
        "worker_busy_seconds",
        "Time each worker process had at least one request to run",
        labels=("worker",),
    )
    restarts = CounterMetricFamily(
        "worker_restarts", "Times each worker process was restarted", labels=("worker",)
    )
    for worker in workers:
        busy.add_metric((str(worker.index),), worker.busy_seconds)
        restarts.add_metric((str(worker.index),), worker.restarts)
    yield busy
    yield restarts


def _rest_families(prefix: str, http: HttpStats) -> Iterator[Metric]:
    labels = ("method", "path", "status_code")
    requests = CounterMetricFamily(f"{prefix}_requests", "REST requests", labels=labels)
    durations = HistogramMetricFamily(
        f"{prefix}_requests_duration_seconds", "REST request duration in seconds", labels=labels
    )
    in_progress = GaugeMetricFamily(
        f"{prefix}_requests_in_progress", "REST requests being served", labels=("method",)
    )
    for route in http.routes():
        for status, histogram in list(route.by_status.items()):
            route_labels = (route.method, route.path, str(status))
            requests.add_metric(route_labels, histogram.count)
            _add_histogram(durations, route_labels, histogram)
    for serving in http.in_progress():
        in_progress.add_metric((serving.method,), serving.count)
    yield requests
    yield durations
    yield in_progress


def _grpc_families(grpc: GrpcStats) -> Iterator[Metric]:
    started = CounterMetricFamily("grpc_server_started", "gRPC calls started", labels=GRPC_LABELS)
    handled = CounterMetricFamily(
        "grpc_server_handled", "gRPC calls completed", labels=(*GRPC_LABELS, "grpc_code")
    )
    durations = HistogramMetricFamily(
        "grpc_server_handling_seconds", "gRPC call duration in seconds", labels=GRPC_LABELS
    )
    for method in grpc.methods():
        labels = (method.kind, method.service, method.method)
        started.add_metric(labels, method.started)
        for code, count in list(method.handled.items()):
            handled.add_metric((*labels, code), count)
        _add_histogram(durations, labels, method.durations)
    yield started
    yield handled
    yield durations


def _add_histogram(
    family: HistogramMetricFamily, labels: tuple[str, ...], histogram: StatsHistogram
) -> None:
    buckets = [(floatToGoString(bound), count) for bound, count in histogram.cumulative()]
    family.add_metric(labels, buckets, histogram.sum)


def build_registry(sources: Sources, rest_prefix: str) -> CollectorRegistry:
    """The registry the endpoint serves; custom metrics are routed into it."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ServerCollector(sources, rest_prefix))
    for standard in (ProcessCollector, PlatformCollector, GCCollector):
        standard(registry=registry)
    gpu_metrics.register(registry)  # where a GPU can be read: absent, not zero, elsewhere
    custom_metrics.set_sink(CustomMetrics(registry).apply)
    return registry


# The endpoint: a plain ASGI app the server runs on metrics_port.

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def metrics_app(registry: CollectorRegistry, endpoint: str) -> ASGIApp:
    """Serve ``registry`` on ``endpoint``; every other path gets a 404 that says where."""
    return endpoint_app(endpoint, exposition_app(registry))


def endpoint_app(endpoint: str, serve: ASGIApp) -> ASGIApp:
    """``serve`` on ``endpoint`` alone (with or without a final slash), a 404 that says
    where elsewhere: one server's registry, or the supervisor's sum (supervisor/metrics.py)."""
    endpoint = "/" + endpoint.strip("/")
    not_found = f"Not found; Prometheus metrics are served at {endpoint}\n".encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"].rstrip("/") == endpoint.rstrip("/") or scope["path"] == endpoint:
            await serve(scope, receive, send)
            return
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        await send({"type": "http.response.start", "status": 404, "headers": headers})
        await send({"type": "http.response.body", "body": not_found})

    return app
