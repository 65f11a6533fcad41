"""Recording (observability/stats.py), custom metrics, their Prometheus export, and JSON logs."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inferd import custom_metrics
from inferd.custom_metrics import Definition
from inferd.observability.logs import JSONFormatter, _SkipScrapes
from inferd.observability.metrics import Sources, build_registry, metrics_app
from inferd.observability.stats import GrpcStats, Histogram, HttpStats, ModelStats, ModelStatsTable
from inferd.types import ModelState


@pytest.fixture(autouse=True)
def fresh_custom_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no custom metric registered and no sink."""
    monkeypatch.setattr(custom_metrics, "_state", custom_metrics._State())


def samples(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


# Recording


def test_histogram_counts_values_up_to_each_bound() -> None:
    histogram = Histogram((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 2.0, 7.0):
        histogram.observe(value)
    assert histogram.counts == [2, 2, 1]
    assert histogram.cumulative() == [(1.0, 2), (2.0, 4), (float("inf"), 5)]
    assert (histogram.count, histogram.sum) == (5, 12.0)


def test_model_stats_follow_triton_semantics() -> None:
    stats = ModelStats("m", None)
    assert stats.to_dict()["last_inference"] == 0
    stats.executed(rows=4, requests=1)
    stats.waited(5_000)
    stats.computed(20_000)
    now = time.perf_counter_ns()
    stats.succeeded(now - 30_000, now)
    stats.failed(now - 7_000, now)
    out = stats.to_dict()
    assert (out["name"], out["version"]) == ("m", "")
    assert (out["inference_count"], out["execution_count"]) == (4, 1)
    inference = out["inference_stats"]
    assert inference["success"] == {"count": 1, "ns": 30_000}
    assert inference["fail"] == {"count": 1, "ns": 7_000}
    assert inference["queue"] == {"count": 1, "ns": 5_000}
    assert inference["compute_infer"] == {"count": 1, "ns": 20_000}
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in out["batch_stats"]] == [(4, 1)]
    assert abs(out["last_inference"] / 1000 - time.time()) < 5
    assert (stats.duration.count, stats.queue_wait.count, stats.batch_size.sum) == (2, 1, 4)


def test_a_batch_counts_once_with_all_its_rows() -> None:
    stats = ModelStats("m", "1")
    stats.executed(rows=6, requests=3)
    stats.executed(rows=1, requests=1)
    assert (stats.execution_count, stats.inference_count) == (2, 7)
    assert stats.batch_counts == {6: 1, 1: 1}


def test_histograms_are_kept_only_for_metrics() -> None:
    stats = ModelStatsTable(observe=False).of("m", None)
    stats.succeeded(0, 1_000)
    stats.waited(10)
    stats.executed(rows=2, requests=1)
    assert (stats.success_count, stats.queue_count, stats.execution_count) == (1, 1, 1)
    assert stats.duration.count == stats.queue_wait.count == stats.batch_size.count == 0


def test_stats_table_keeps_one_entry_per_version() -> None:
    table = ModelStatsTable()
    assert table.of("m", "1") is table.of("m", "1")
    assert table.of("m", "1") is not table.of("m", "2")
    assert [(s.name, s.version) for s in table] == [("m", "1"), ("m", "2")]


# Custom metrics


def collect_into(sent: list[tuple[list[Definition], list[Any]]]) -> None:
    custom_metrics.set_sink(lambda definitions, records: sent.append((definitions, records)))


def test_log_labels_values_with_the_current_model() -> None:
    sent: list[tuple[list[Definition], list[Any]]] = []
    collect_into(sent)
    custom_metrics.register("hits", "Hits", kind="counter")
    token = custom_metrics.set_model(custom_metrics.model_labels("m", None))
    try:
        custom_metrics.log(hits=2, latency=np.float32(0.5))
    finally:
        custom_metrics.reset_model(token)
    definitions = [d for batch, _ in sent for d in batch]
    records = [r for _, batch in sent for r in batch]
    assert [(d.name, d.kind) for d in definitions] == [
        ("hits", "counter"),
        ("latency", "histogram"),
    ]
    assert records == [("hits", ("m", ""), 2.0), ("latency", ("m", ""), 0.5)]


def test_log_outside_a_model_says_where_to_call_it() -> None:
    with pytest.raises(RuntimeError, match=r"outside a model's load\(\) or predict\(\)"):
        custom_metrics.log(hits=1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: custom_metrics.register("2fast"), "Invalid metric name"),
        (lambda: custom_metrics.register("ok", kind="summary"), "Invalid metric kind"),
        (lambda: custom_metrics.register("ok", kind="gauge", buckets=[1]), "histograms only"),
    ],
)
def test_register_refuses_what_prometheus_cannot_take(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_register_again_must_agree_on_the_kind() -> None:
    custom_metrics.register("queue", kind="gauge")
    custom_metrics.register("queue", kind="gauge")
    with pytest.raises(ValueError, match="already registered as a gauge"):
        custom_metrics.register("queue", kind="counter")


@pytest.mark.parametrize(
    ("values", "error"),
    [({"hits": -1}, ValueError), ({"hits": "3"}, TypeError), ({"hits": None}, TypeError)],
)
def test_log_refuses_bad_values(values: dict[str, Any], error: type[Exception]) -> None:
    custom_metrics.register("hits", kind="counter")
    token = custom_metrics.set_model(("m", ""))
    try:
        with pytest.raises(error, match="hits"):
            custom_metrics.log(**values)
    finally:
        custom_metrics.reset_model(token)


def test_a_worker_buffers_until_take() -> None:
    custom_metrics.start_buffering()
    custom_metrics.register("hits", kind="counter")
    token = custom_metrics.set_model(("m", "2"))
    custom_metrics.log(hits=1)
    custom_metrics.log(hits=3)
    custom_metrics.reset_model(token)
    shipment = custom_metrics.take()
    assert shipment is not None
    definitions, records = shipment
    assert [d.name for d in definitions] == ["hits"]
    assert records == [("hits", ("m", "2"), 1.0), ("hits", ("m", "2"), 3.0)]
    assert custom_metrics.take() is None


# Prometheus export


class FakeScheduler:
    waiting, in_flight = 2, 1


class FakeVersion:
    def __init__(self, name: str, version: str | None, state: ModelState) -> None:
        self.name, self.version, self.state, self.load_seconds = name, version, state, 1.5
        self.scheduler = FakeScheduler()


class FakeWorker:
    index, busy_seconds, restarts = 0, 2.5, 1


def test_the_collector_exports_every_source_with_one_label_scheme() -> None:
    models, http, grpc = ModelStatsTable(), HttpStats(), GrpcStats()
    models.of("m", "1").succeeded(1_000_000, 3_000_000)
    http.route("POST", "/v2/models/{name}/infer").finished(200, 0.002)
    grpc.method("inference.GRPCInferenceService", "ModelInfer").finished("OK", 0.001)
    versions = [FakeVersion("m", "1", ModelState.READY), FakeVersion("n", None, ModelState.LOADING)]
    sources = Sources(models, lambda: versions, lambda: [FakeWorker()], http, grpc)
    found = samples(build_registry(sources, "api"))
    m1 = (("model_name", "m"), ("model_version", "1"))
    assert found[("model_infer_request_success_total", m1)] == 1
    assert found[("model_infer_request_duration_bucket", (("le", "0.0025"), *m1))] == 1
    assert found[("model_load_duration_seconds", m1)] == 1.5
    assert (found[("batch_request_queue", m1)], found[("parallel_request_queue", m1)]) == (2, 1)
    assert found[("loaded_models", ())] == 1
    # A version that is not loaded yet shows from zero, labelled "" when unversioned.
    unversioned = (("model_name", "n"), ("model_version", ""))
    assert found[("model_infer_request_failure_total", unversioned)] == 0
    route = (("method", "POST"), ("path", "/v2/models/{name}/infer"), ("status_code", "200"))
    assert found[("api_requests_total", route)] == 1
    assert found[("worker_busy_seconds_total", (("worker", "0"),))] == 2.5
    assert found[("worker_restarts_total", (("worker", "0"),))] == 1
    method = (("grpc_method", "ModelInfer"), ("grpc_service", "inference.GRPCInferenceService"))
    assert (
        found[("grpc_server_handled_total", (("grpc_code", "OK"), *method, ("grpc_type", "unary")))]
        == 1
    )


def test_streams_are_exported_open_first_response_and_length() -> None:
    models = ModelStatsTable()
    stats = models.of("m", None)
    for responses in (3, 40):
        stats.stream_opened()
        stats.stream_first_response(2_000_000)  # 2 ms
        stats.stream_closed(responses)
    stats.stream_opened()  # still open
    found = samples(build_registry(Sources(models), "api"))
    m = (("model_name", "m"), ("model_version", ""))
    assert found[("model_streams_in_flight", m)] == 1
    assert found[("model_stream_first_response_seconds_bucket", (("le", "0.0025"), *m))] == 2
    assert found[("model_stream_responses_bucket", (("le", "5.0"), *m))] == 1
    assert found[("model_stream_responses_count", m)] == 2
    assert found[("model_stream_responses_sum", m)] == 43


def test_load_seconds_are_a_histogram_per_model_version() -> None:
    models = ModelStatsTable()
    stats = models.of("m", "2")
    for seconds in (0.004, 0.3, 90.0):  # ms to minutes fall in distinct buckets
        stats.loaded(seconds)
    models.of("n", None)  # known, never loaded: zeros
    found = samples(build_registry(Sources(models), "api"))
    m = (("model_name", "m"), ("model_version", "2"))
    assert found[("model_load_seconds_bucket", (("le", "0.005"), *m))] == 1
    assert found[("model_load_seconds_bucket", (("le", "0.5"), *m))] == 2
    assert found[("model_load_seconds_bucket", (("le", "60.0"), *m))] == 2
    assert found[("model_load_seconds_bucket", (("le", "120.0"), *m))] == 3
    assert found[("model_load_seconds_count", m)] == 3
    assert found[("model_load_seconds_sum", m)] == pytest.approx(90.304)
    assert found[("model_load_seconds_count", (("model_name", "n"), ("model_version", "")))] == 0


def test_load_seconds_are_not_kept_with_metrics_off() -> None:
    stats = ModelStats("m", None, observe=False)
    stats.loaded(1.0)
    assert stats.load.count == 0


def test_token_timings_are_exported_per_model() -> None:
    models = ModelStatsTable()
    stats = models.of("m", None)
    stats.tokens_came(1, 2_000_000)  # one token 2 ms after the previous one
    stats.tokens_came(3, 30_000_000)  # three together after 30 ms: 10 ms each
    stats.completion_ended(8, 400_000_000)  # 8 tokens in 0.4 s: 20 per second
    found = samples(build_registry(Sources(models), "api"))
    m = (("model_name", "m"), ("model_version", ""))
    assert found[("model_inter_token_seconds_count", m)] == 4
    assert found[("model_inter_token_seconds_bucket", (("le", "0.0025"), *m))] == 1
    assert found[("model_inter_token_seconds_bucket", (("le", "0.01"), *m))] == 4
    assert found[("model_inter_token_seconds_sum", m)] == pytest.approx(0.032)
    assert found[("model_completion_tokens_per_second_bucket", (("le", "10.0"), *m))] == 0
    assert found[("model_completion_tokens_per_second_bucket", (("le", "20.0"), *m))] == 1
    assert found[("model_completion_tokens_per_second_sum", m)] == pytest.approx(20.0)


def test_token_timings_are_not_kept_with_metrics_off() -> None:
    stats = ModelStatsTable().of("m", None)
    stats.observe = False
    stats.tokens_came(2, 1_000_000)
    stats.completion_ended(2, 1_000_000)
    assert (stats.inter_token.count, stats.token_rate.count) == (0, 0)


def test_custom_metrics_are_exported_and_clashes_are_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = build_registry(Sources(ModelStatsTable()), "rest_server")
    custom_metrics.register("tokens", kind="counter")
    custom_metrics.register("temperature", kind="gauge")
    custom_metrics.register("model_infer_request_success", kind="counter")  # a built-in name
    token = custom_metrics.set_model(("m", "1"))
    try:
        custom_metrics.log(tokens=3, temperature=0.7, model_infer_request_success=1)
        custom_metrics.log(tokens=2, temperature=0.2)
    finally:
        custom_metrics.reset_model(token)
    found = samples(registry)
    labels = (("model_name", "m"), ("model_version", "1"))
    assert found[("tokens_total", labels)] == 5
    assert found[("temperature", labels)] == 0.2
    assert ("model_infer_request_success_total", labels) not in found  # the built-in
    assert "'model_infer_request_success' is not exported" in caplog.text


def call_asgi(app: Any, path: str) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_the_endpoint_serves_its_path_only() -> None:
    app = metrics_app(build_registry(Sources(ModelStatsTable()), "rest_server"), "custom")
    status, body = call_asgi(app, "/custom")
    assert status == 200 and b"loaded_models 0.0" in body
    assert call_asgi(app, "/metrics") == (
        404,
        b"Not found; Prometheus metrics are served at /custom\n",
    )


# Logs


def record(name: str, message: str, args: Any, **extra: Any) -> logging.LogRecord:
    entry = logging.LogRecord(name, logging.INFO, __file__, 1, message, args, None)
    entry.__dict__.update(extra)
    return entry


def test_json_logs_carry_extra_fields_and_access_log_fields() -> None:
    formatter = JSONFormatter()
    request = json.loads(formatter.format(record("inferd.requests", "done", (), model_name="m")))
    assert (request["message"], request["model_name"]) == ("done", "m")
    access_args = ("127.0.0.1:5", "GET", "/v2", "1.1", 200)
    access = json.loads(
        formatter.format(record("uvicorn.access", '%s "%s %s HTTP/%s" %d', access_args))
    )
    assert (access["method"], access["path"], access["status_code"]) == ("GET", "/v2", 200)


def test_scrapes_are_kept_out_of_the_access_log() -> None:
    skip = _SkipScrapes("metrics")
    scrape = record("uvicorn.access", "%s %s %s %s %d", ("c", "GET", "/metrics", "1.1", 200))
    other = record("uvicorn.access", "%s %s %s %s %d", ("c", "GET", "/v2", "1.1", 200))
    assert (skip.filter(scrape), skip.filter(other)) == (False, True)
