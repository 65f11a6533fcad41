"""Runtimes' custom metrics (:mod:`inferd.custom_metrics`) as prometheus_client metrics.

Each is created on first sight, in the registry the endpoint serves, labelled with
the model's ``model_name`` and ``model_version``, or with the labels its definition
names (Triton's ``pb_utils.MetricFamily``). A counter adds what is logged, a gauge
takes it, a histogram observes it. A counter defined ``total_suffix=False`` is a
counter exposed under its own name, as Triton's are (``plain_counters.py``:
prometheus_client's counters add ``_total``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from inferd.custom_metrics import Definition, Record
from inferd.observability.plain_counters import PlainCounter

logger = logging.getLogger(__name__)

MODEL_LABELS = ("model_name", "model_version")

# A metric, and how it was defined (what a logged value does to it).
Known = tuple[MetricWrapperBase | PlainCounter, Definition]


class CustomMetrics:
    """Runtimes' metrics: prometheus_client metrics created on first sight."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._metrics: dict[str, Known | None] = {}
        # Logged from the event loop (values from workers) and from runtime
        # threads (threads_per_worker > 1 with parallel_workers: 0).
        self._lock = threading.Lock()

    def apply(self, definitions: list[Definition], records: list[Record]) -> None:
        for definition in definitions:
            self._metric(definition)
        for name, labels, value in records:
            known = self._metrics.get(name)
            if known is None and name not in self._metrics:
                known = self._metric(Definition(name, "histogram", ""))
            if known is None:
                continue
            metric, definition = known
            try:
                child = metric.labels(*labels)
            except ValueError as error:  # labels other than the definition's: not exported
                logger.warning("Custom metric %r: a value is not exported: %s", name, error)
                continue
            _apply_value(child, definition.kind, value)

    def _metric(self, definition: Definition) -> Known | None:
        """The metric for ``definition``, created if new; None if it cannot be."""
        with self._lock:
            if definition.name in self._metrics:
                return self._metrics[definition.name]
            try:
                known: Known | None = (_new_metric(definition, self._registry), definition)
            except ValueError as error:
                logger.warning("Custom metric %r is not exported: %s", definition.name, error)
                known = None
            self._metrics[definition.name] = known
            return known


def _new_metric(
    definition: Definition, registry: CollectorRegistry
) -> MetricWrapperBase | PlainCounter:
    description = definition.description or f"Custom metric {definition.name}"
    labels = definition.labelnames or MODEL_LABELS
    common: dict[str, Any] = {"labelnames": labels, "registry": registry}
    if definition.kind == "counter" and definition.total_suffix:
        return Counter(definition.name, description, **common)
    if definition.kind == "counter":
        return PlainCounter(definition.name, description, labels, registry)
    if definition.kind == "gauge":
        return Gauge(definition.name, description, **common)
    if definition.buckets:
        common["buckets"] = definition.buckets
    return Histogram(definition.name, description, **common)


def _apply_value(metric: Any, kind: str, value: float) -> None:
    if kind == "counter":
        metric.inc(value)
    elif kind == "gauge":
        metric.set(value)
    else:
        metric.observe(value)
