"""``pb_utils.MetricFamily``: a model's custom metrics, with labels of its own.

A family is a counter, a gauge or a histogram with a name and a description; each
``Metric(labels={...})`` of it is one labelled series, exported on the server's
metrics port under the family's name and exactly those labels (as Triton does: a
counter keeps its own name, no ``_total``). Values travel as inferd's custom
metrics do (:mod:`inferd.custom_metrics`): from a worker process with its next reply.
``value()`` answers what this process added or set.
"""

from __future__ import annotations

import threading
from typing import Any

from inferd import custom_metrics
from inferd.triton.python_backend.tensor import TritonModelException

_KINDS = {0: "counter", 1: "gauge", 2: "histogram"}


class MetricFamily:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in _KINDS:
            raise TritonModelException(
                f"MetricFamily {name!r}: kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM"
            )
        if not isinstance(name, str) or not custom_metrics.NAME.fullmatch(name):
            raise TritonModelException(f"MetricFamily: invalid metric name {name!r}")
        self.name = name
        self.description = description
        self.kind = kind
        self._labelnames: tuple[str, ...] | None = None
        self._lock = threading.Lock()

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        return Metric(self, dict(labels or {}), buckets)

    def _register(self, labelnames: tuple[str, ...], buckets: list[float] | None) -> None:
        """Declare the family on its first Metric: its label names are the family's."""
        with self._lock:
            if self._labelnames is None:
                if not labelnames:
                    raise TritonModelException(
                        f"MetricFamily {self.name!r}: a Metric needs at least one label"
                    )
                try:
                    custom_metrics.register(
                        self.name,
                        self.description,
                        kind=_KINDS[self.kind],
                        buckets=buckets,
                        labelnames=labelnames,
                        total_suffix=False,
                    )
                except ValueError as error:
                    raise TritonModelException(str(error)) from None
                self._labelnames = labelnames
            elif labelnames != self._labelnames:
                raise TritonModelException(
                    f"MetricFamily {self.name!r}: every Metric of a family has the labels "
                    f"{list(self._labelnames)}, got {list(labelnames)}"
                )


class Metric:
    """One labelled series of a family."""

    def __init__(
        self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None
    ) -> None:
        if family.kind == MetricFamily.HISTOGRAM and not buckets:
            raise TritonModelException(f"Histogram {family.name!r}: a Metric needs buckets")
        if family.kind != MetricFamily.HISTOGRAM and buckets:
            raise TritonModelException(f"Metric {family.name!r}: buckets are for histograms")
        names = tuple(sorted(labels))
        family._register(names, buckets)
        self._family = family
        self._values = tuple(str(labels[name]) for name in names)
        self._value = 0.0
        self._lock = threading.Lock()

    def increment(self, value: float) -> None:
        kind = self._family.kind
        if kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("increment() is for counters and gauges, not histograms")
        if kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException(f"Counter {self._family.name!r} can only go up")
        with self._lock:
            self._value += value
            now = self._value
        # A counter sends what it adds (worker processes' values add up), a gauge its value.
        self._log(value if kind == MetricFamily.COUNTER else now)

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("set() is for gauges")
        with self._lock:
            self._value = float(value)
        self._log(value)

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("observe() is for histograms")
        self._log(value)

    def value(self) -> float:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("value() is for counters and gauges")
        return self._value

    def _log(self, value: Any) -> None:
        custom_metrics.log_labelled(self._family.name, self._values, value)
