"""Helpers for the metrics, statistics and logs tests: scraping, a metrics-logging runtime."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.models import TEST_RUNTIMES, write_model_folder

# A runtime that logs custom metrics from load and predict (written next to the
# shared test runtimes in a model's folder).
METRICS_RUNTIME = textwrap.dedent(
    '''
    import os
    import time

    import numpy as np

    from inferd import InferenceRequest, InferenceResponse, Model, Tensor

    from inferd import custom_metrics
    class LogsMetrics(Model):
        """Logs rows_seen (counter), last_rows (gauge), input_total (histogram) and
        an unregistered name; sleeps for the request parameter ``sleep`` seconds."""

        async def load(self) -> bool:
            custom_metrics.register("rows_seen", "Rows this model was asked about", "counter")
            custom_metrics.register("last_rows", "Rows of the latest request", kind="gauge")
            custom_metrics.register("input_total", "Sum of x per request", buckets=[1, 10, 100])
            return True

        def predict(self, request: InferenceRequest) -> InferenceResponse:
            x = request.input("x").data
            time.sleep(float(request.parameters.get("sleep", 0)))
            custom_metrics.log(
                rows_seen=len(x), last_rows=len(x), input_total=x.sum(), unregistered=0.5
            )
            return InferenceResponse(outputs=[Tensor("pid", np.array([os.getpid()], np.int64))])
    '''
)


def add_metrics_model(repository: Path, folder: str, **settings: Any) -> Path:
    """A model folder serving ``metricmodels.LogsMetrics`` (and the shared test runtimes)."""
    files = {"metricmodels.py": METRICS_RUNTIME, TEST_RUNTIMES.name: TEST_RUNTIMES}
    implementation = "metricmodels.LogsMetrics"
    return write_model_folder(repository, folder, implementation, files=files, **settings)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int, endpoint: str = "/metrics") -> Samples:
    """Every sample on the metrics endpoint, by (sample name, sorted labels)."""
    response = httpx.get(f"http://127.0.0.1:{port}{endpoint}", timeout=10)
    assert response.status_code == 200, response.text
    return parse(response.text)


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 if absent: a counter not incremented yet)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def model(name: str, version: str = "") -> dict[str, str]:
    return {"model_name": name, "model_version": version}


def label_values(samples: Samples, label: str) -> set[str]:
    return {dict(labels)[label] for _, labels in samples if label in dict(labels)}
