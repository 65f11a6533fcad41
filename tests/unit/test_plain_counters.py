"""Triton's counters exposed as Triton writes them: TYPE counter, the name as given."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

from prometheus_client import CollectorRegistry

from inferd.custom_metrics import Definition
from inferd.observability.custom import CustomMetrics
from inferd.observability.plain_counters import exposition_app, named_as_given
from inferd.supervisor import exposition

LATENCY = Definition(
    "requests_process_latency_ns", "counter", "Cumulative time", None, ("model", "version"), False
)
HITS = Definition("hits", "counter", "Hits")  # inferd's own: prometheus_client's _total


def scrape(registry: CollectorRegistry, **headers: str) -> tuple[bytes, dict[bytes, bytes]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    raw = [(key.replace("_", "-").encode(), value.encode()) for key, value in headers.items()]
    scope = {"type": "http", "path": "/metrics", "headers": raw}
    asyncio.run(exposition_app(registry)(scope, receive, send))
    return sent[1]["body"], dict(sent[0]["headers"])


def registry_with_counts() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    metrics = CustomMetrics(registry)
    metrics.apply([LATENCY, HITS], [("requests_process_latency_ns", ("m", "1"), 40.0)])
    metrics.apply([], [("requests_process_latency_ns", ("m", "1"), 2.0)])
    metrics.apply([], [("hits", ("m", ""), 3.0)])
    return registry


def test_a_triton_counter_is_a_counter_under_its_own_name() -> None:
    text = scrape(registry_with_counts())[0].decode()
    assert "# HELP requests_process_latency_ns Cumulative time\n" in text
    assert "# TYPE requests_process_latency_ns counter\n" in text
    assert 'requests_process_latency_ns{model="m",version="1"} 42.0\n' in text
    assert "requests_process_latency_ns_total" not in text
    assert "requests_process_latency_ns_created" not in text
    assert "# TYPE hits_total counter\n" in text  # inferd's counters keep Prometheus' name


def test_openmetrics_keeps_its_total_samples_and_gzip_is_answered() -> None:
    body, headers = scrape(
        registry_with_counts(),
        accept="application/openmetrics-text; version=1.0.0",
        accept_encoding="gzip",
    )
    text = gzip.decompress(body).decode()
    assert headers[b"content-encoding"] == b"gzip"
    assert "# TYPE requests_process_latency_ns counter\n" in text
    assert 'requests_process_latency_ns_total{model="m",version="1"} 42.0\n' in text


def test_only_the_names_asked_are_rewritten() -> None:
    text = b"# TYPE a_total counter\na_total 1.0\nab_total 2.0\n"
    assert named_as_given(text, {"a"}) == b"# TYPE a counter\na 1.0\nab_total 2.0\n"


def test_the_supervisor_sums_them_and_keeps_a_restarted_processs_counts() -> None:
    one = exposition.read(scrape(registry_with_counts())[0].decode())
    merged = exposition.merge([one, one])
    text = exposition.write(merged.values(), openmetrics=False)
    assert "# TYPE requests_process_latency_ns counter\n" in text
    assert 'requests_process_latency_ns{model="m",version="1"} 84.0' in text
    kept = exposition.monotonic_part(one)  # what a restart would take back
    assert "requests_process_latency_ns" in kept
