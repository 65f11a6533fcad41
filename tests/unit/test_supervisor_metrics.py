"""The supervisor's /metrics: several protocol processes' expositions merged into one.

The merged text is read back with prometheus_client's own parsers, the reference."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from inferd import custom_metrics
from inferd.custom_metrics import Definition
from inferd.observability.metrics import CustomMetrics, Sources, build_registry
from inferd.observability.stats import HttpStats, ModelStatsTable
from inferd.supervisor.exposition import Exposition, merge, read, write
from inferd.supervisor.fanout import Answer
from inferd.supervisor.metrics import ANSWERED, EXPECTED, Totals, build_metrics_app, server_metrics
from inferd.supervisor.paths import PrivatePaths

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(autouse=True)
def fresh_custom_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_registry routes custom metrics to its registry: each test starts clean."""
    monkeypatch.setattr(custom_metrics, "_state", custom_metrics._State())


def samples(metrics: Any) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in metrics
        for sample in metric.samples
    }


def found(merged: Exposition) -> Samples:
    """The samples of a merged OpenMetrics exposition, as prometheus_client reads them."""
    return samples(text_string_to_metric_families(write(merged.values(), openmetrics=True)))


M1 = (("model_name", "m"), ("model_version", "1"))
M2 = (("model_name", "n"), ("model_version", ""))

FIRST = """# HELP model_infer_request_success Inference requests that succeeded
# TYPE model_infer_request_success counter
model_infer_request_success_total{model_name="m",model_version="1"} 3.0
# HELP tokens Tokens
# TYPE tokens counter
tokens_total{model_name="m",model_version="1"} 10.0
tokens_created{model_name="m",model_version="1"} 200.0
# HELP model_infer_request_duration Duration
# TYPE model_infer_request_duration histogram
model_infer_request_duration_bucket{le="0.1",model_name="m",model_version="1"} 2.0
model_infer_request_duration_bucket{le="+Inf",model_name="m",model_version="1"} 3.0
model_infer_request_duration_count{model_name="m",model_version="1"} 3.0
model_infer_request_duration_sum{model_name="m",model_version="1"} 0.5
# HELP latency Latency
# TYPE latency summary
latency_count 4.0
latency_sum 2.0
latency{quantile="0.99"} 0.9
# HELP model_streams_in_flight Streams open now
# TYPE model_streams_in_flight gauge
model_streams_in_flight{model_name="m",model_version="1"} 2.0
# HELP loaded_models Loaded
# TYPE loaded_models gauge
loaded_models 2.0
# HELP nv_gpu_memory_used_bytes GPU used memory
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 1000.0
# HELP process_start_time_seconds Start time
# TYPE process_start_time_seconds gauge
process_start_time_seconds 500.0
# HELP python_info Python platform information
# TYPE python_info gauge
python_info{version="3.11.7"} 1.0
# HELP temperature A runtime's gauge
# TYPE temperature gauge
temperature{model_name="m",model_version="1"} 0.25
# EOF
"""

SECOND = """# HELP model_infer_request_success Inference requests that succeeded
# TYPE model_infer_request_success counter
model_infer_request_success_total{model_name="m",model_version="1"} 4.0
model_infer_request_success_total{model_name="n",model_version=""} 1.0
# HELP tokens Tokens
# TYPE tokens counter
tokens_total{model_name="m",model_version="1"} 5.0
tokens_created{model_name="m",model_version="1"} 100.0
# HELP model_infer_request_duration Duration
# TYPE model_infer_request_duration histogram
model_infer_request_duration_bucket{le="0.1",model_name="m",model_version="1"} 1.0
model_infer_request_duration_bucket{le="+Inf",model_name="m",model_version="1"} 4.0
model_infer_request_duration_count{model_name="m",model_version="1"} 4.0
model_infer_request_duration_sum{model_name="m",model_version="1"} 1.25
# HELP latency Latency
# TYPE latency summary
latency_count 6.0
latency_sum 3.0
latency{quantile="0.99"} 0.7
# HELP model_streams_in_flight Streams open now
# TYPE model_streams_in_flight gauge
model_streams_in_flight{model_name="m",model_version="1"} 1.0
# HELP loaded_models Loaded
# TYPE loaded_models gauge
loaded_models 2.0
# HELP nv_gpu_memory_used_bytes GPU used memory
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 1200.0
# HELP process_start_time_seconds Start time
# TYPE process_start_time_seconds gauge
process_start_time_seconds 400.0
# HELP python_info Python platform information
# TYPE python_info gauge
python_info{version="3.11.7"} 1.0
# HELP temperature A runtime's gauge
# TYPE temperature gauge
temperature{model_name="m",model_version="1"} 0.5
# EOF
"""


def merged() -> Samples:
    return found(merge([read(FIRST), read(SECOND)]))


def test_counters_are_summed_per_label_set_and_a_label_set_of_one_process_kept() -> None:
    found = merged()
    assert found[("model_infer_request_success_total", M1)] == 7
    assert found[("model_infer_request_success_total", M2)] == 1
    assert found[("tokens_total", M1)] == 15  # a custom counter


def test_histogram_buckets_sums_and_counts_are_summed() -> None:
    found = merged()
    assert found[("model_infer_request_duration_bucket", (("le", "0.1"), *M1))] == 3
    assert found[("model_infer_request_duration_bucket", (("le", "+Inf"), *M1))] == 7
    assert found[("model_infer_request_duration_count", M1)] == 7
    assert found[("model_infer_request_duration_sum", M1)] == 1.75


def test_summaries_sum_count_and_sum_and_keep_the_largest_quantile() -> None:
    found = merged()
    assert (found[("latency_count", ())], found[("latency_sum", ())]) == (10, 5)
    assert found[("latency", (("quantile", "0.99"),))] == 0.9  # no sum of quantiles exists


def test_gauges_of_what_each_process_holds_are_summed() -> None:
    found = merged()
    assert found[("model_streams_in_flight", M1)] == 3
    assert found[("temperature", M1)] == 0.75  # a runtime's gauge: one copy per process


def test_gauges_every_process_reports_alike_are_the_largest_and_starts_the_earliest() -> None:
    found = merged()
    assert found[("loaded_models", ())] == 2  # the same two models in each, not four
    assert found[("nv_gpu_memory_used_bytes", (("gpu_uuid", "GPU-1"),))] == 1200
    assert found[("python_info", (("version", "3.11.7"),))] == 1
    assert found[("process_start_time_seconds", ())] == 400
    assert found[("tokens_created", M1)] == 100


def test_help_and_type_are_kept() -> None:
    text = write(merge([read(FIRST), read(SECOND)]).values(), openmetrics=True)
    assert "# HELP tokens Tokens\n# TYPE tokens counter\n" in text
    assert 'tokens_total{model_name="m",model_version="1"} 15.0\n' in text
    assert "# TYPE model_infer_request_duration histogram\n" in text
    assert text.endswith("\n# EOF\n") and text.count("# EOF") == 1


def test_a_family_of_another_type_in_one_process_is_left_out_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clashing = "# TYPE loaded_models counter\nloaded_models_total 9.0\n# EOF\n"
    assert found(merge([read(FIRST), read(clashing)]))[("loaded_models", ())] == 2
    assert "loaded_models is a gauge in one protocol process and a counter" in caplog.text


def test_a_line_that_is_no_sample_is_refused() -> None:
    with pytest.raises(ValueError, match="not a sample line"):
        read('# TYPE x gauge\nx{a="1" 2.0\n')


def real_registry() -> Any:
    """A protocol process's registry (observability/metrics.py) with counts in it, a
    route template with braces and a label value with a space and a quote among them."""
    models, http = ModelStatsTable(), HttpStats()
    now = time.perf_counter_ns()
    models.of("m", "1").succeeded(now - 2_000_000, now)
    models.of("m", "1").executed(rows=2, requests=1)
    models.of('my "model" v2', None).failed(now - 1_000_000, now)
    http.route("POST", "/v2/models/{model_name}/infer").finished(200, 0.002)
    registry = build_registry(Sources(models, http=http), "rest_server")
    CustomMetrics(registry).apply(
        [Definition("tokens", "counter", "Tokens"), Definition("size", "histogram", "Size")],
        [("tokens", ("m", "1"), 3.0), ("size", ("m", "1"), 0.3)],
    )
    return registry


@pytest.mark.parametrize("encode", [generate_latest, generate_openmetrics])
def test_one_process_merged_alone_is_what_it_served_byte_for_byte(encode: Any) -> None:
    served = encode(real_registry()).decode()
    openmetrics = encode is generate_openmetrics
    assert write(merge([read(served)]).values(), openmetrics) == served


def test_two_processes_in_the_text_format_add_up_as_the_reference_parser_reads_them() -> None:
    served = generate_latest(real_registry()).decode()
    one = samples(text_families(served))
    both = samples(text_families(write(merge([read(served), read(served)]).values(), False)))
    route = (("method", "POST"), ("path", "/v2/models/{model_name}/infer"))
    assert both[("rest_server_requests_total", (*route, ("status_code", "200")))] == 2
    failed = (("model_name", 'my "model" v2'), ("model_version", ""))
    assert both[("model_infer_request_failure_total", failed)] == 2
    assert both[("tokens_created", M1)] == one[("tokens_created", M1)]  # the earliest
    assert both[("loaded_models", ())] == one[("loaded_models", ())]
    assert (
        both[("size_bucket", (("le", "+Inf"), *M1))]
        == 2 * one[("size_bucket", (("le", "+Inf"), *M1))]
    )


def answer(socket: str, body: str = "", status: int = 200, error: str = "") -> Answer:
    return Answer(Path(socket), status, {}, body.encode(), error)


def test_a_process_that_does_not_answer_is_left_out_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = [
        answer("metrics-0.sock", FIRST),
        answer("metrics-1.sock", status=0, error="ConnectError: no such file"),
        answer("metrics-2.sock", "Not found", status=404),
        answer("metrics-3.sock", SECOND),
    ]
    summed = found(server_metrics(answers))
    assert summed[("model_infer_request_success_total", M1)] == 7
    assert (summed[(ANSWERED, ())], summed[(EXPECTED, ())]) == (2, 4)
    assert "metrics-1.sock left out: ConnectError: no such file" in caplog.text
    assert "metrics-2.sock left out: HTTP 404" in caplog.text


def test_an_answer_that_does_not_parse_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    summed = found(server_metrics([answer("metrics-0.sock", "not { metrics"), answer("b", FIRST)]))
    assert (summed[(ANSWERED, ())], summed[(EXPECTED, ())]) == (1, 2)
    assert "metrics-0.sock left out" in caplog.text


def test_no_process_answering_still_answers_with_the_counts() -> None:
    summed = found(server_metrics([answer("metrics-0.sock", status=0, error="gone")]))
    assert summed == {(EXPECTED, ()): 1, (ANSWERED, ()): 0}


def test_the_app_answers_other_paths_with_a_404_without_asking_anyone(tmp_path: Path) -> None:
    app = build_metrics_app(PrivatePaths(tmp_path), 2, "/prom")
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/metrics", "headers": []}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 404
    assert sent[1]["body"] == b"Not found; Prometheus metrics are served at /prom\n"


def process(started: float, requests: float, streams: float) -> str:
    return f"""# TYPE process_start_time_seconds gauge
process_start_time_seconds {started}
# TYPE model_infer_request_success counter
model_infer_request_success_total{{model_name="m",model_version="1"}} {requests}
# TYPE model_infer_batch_size histogram
model_infer_batch_size_bucket{{le="1.0",model_name="m",model_version="1"}} {requests}
model_infer_batch_size_bucket{{le="+Inf",model_name="m",model_version="1"}} {requests}
model_infer_batch_size_count{{model_name="m",model_version="1"}} {requests}
model_infer_batch_size_sum{{model_name="m",model_version="1"}} {requests}
# TYPE model_streams_in_flight gauge
model_streams_in_flight{{model_name="m",model_version="1"}} {streams}
# EOF
"""


def test_counters_stay_whole_while_a_process_is_missing_and_after_it_restarted() -> None:
    totals = Totals()
    gone = answer("metrics-0.sock", status=0, error="ConnectError")

    def scrape(*answers: Answer) -> tuple[float, float, float, float]:
        summed = found(server_metrics(answers, totals))
        return (
            summed[("model_infer_request_success_total", M1)],
            summed[("model_infer_batch_size_bucket", (("le", "+Inf"), *M1))],
            summed[("model_streams_in_flight", M1)],
            summed[(ANSWERED, ())],
        )

    second = answer("metrics-1.sock", process(started=50, requests=3, streams=1))
    assert scrape(answer("metrics-0.sock", process(100, 5, 2)), second) == (8, 8, 3, 2)
    # process 0 died: its counts stay until it is back, its open streams do not
    assert scrape(gone, second) == (8, 8, 1, 1)
    # restarted (another start time), counting from zero: what it had is kept
    assert scrape(answer("metrics-0.sock", process(200, 1, 0)), second) == (9, 9, 1, 2)
    assert scrape(answer("metrics-0.sock", process(200, 4, 0)), second) == (12, 12, 1, 2)
    # and a second restart keeps both lives' counts
    assert scrape(answer("metrics-0.sock", process(300, 2, 0)), second) == (14, 14, 1, 2)
