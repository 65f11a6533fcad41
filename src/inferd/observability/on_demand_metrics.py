"""The metrics of models loaded on request (``load_on_request``, serving/on_demand.py):
``model_loads_total`` and ``model_evictions_total``, by ``model_name``.

Collected at scrape time from the counters the loads and evictions keep (plain
``Counter`` objects on the event loop, as the rest of the server's metrics).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class OnDemandSource(Protocol):
    @property
    def loads(self) -> Counter[str]: ...

    @property
    def evictions(self) -> Counter[str]: ...


class OnDemandCollector(Collector):
    def __init__(self, source: OnDemandSource) -> None:
        self.source = source

    def collect(self) -> Iterable[CounterMetricFamily]:
        loads = CounterMetricFamily(
            "model_loads", "Models loaded on a request's first use", labels=["model_name"]
        )
        evictions = CounterMetricFamily(
            "model_evictions",
            "Models unloaded to make room under max_loaded_models (least recently used)",
            labels=["model_name"],
        )
        for name, count in sorted(self.source.loads.items()):
            loads.add_metric([name], count)
        for name, count in sorted(self.source.evictions.items()):
            evictions.add_metric([name], count)
        return [loads, evictions]
