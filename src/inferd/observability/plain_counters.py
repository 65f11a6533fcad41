"""Counters exposed under the name their model gave them, as Triton exposes them.

Triton's custom metrics (``pb_utils.MetricFamily.COUNTER``) are written
``# TYPE requests_process_latency_ns counter`` and
``requests_process_latency_ns{model="m",version="1"} 42``: its exposition adds no
``_total`` (Triton's ``custom_metrics`` example client checks those exact lines).
prometheus_client's text writer appends ``_total`` to every counter family and
sample, so these families are written by it and the suffix is taken back off their
lines (:func:`named_as_given`), in the Prometheus text format only: OpenMetrics
requires counter samples to end in ``_total`` (its family keeps the given name).
They have no ``_created`` sample (Triton has none).
"""

from __future__ import annotations

import gzip
import re
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

# Each registry's plain counters, by name (weak: a registry forgotten takes its own).
_NAMES: weakref.WeakKeyDictionary[CollectorRegistry, set[str]] = weakref.WeakKeyDictionary()


class PlainCounter(Collector):
    """A labelled counter written under its own name; ``labels(*values).inc(amount)``."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        registry.register(self)  # raises ValueError for a name taken
        if not name.endswith("_total"):  # one that ends so is written as given already
            _NAMES.setdefault(registry, set()).add(name)

    def labels(self, *values: str) -> _Child:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: labels {list(self.labelnames)}, got {list(values)}")
        return _Child(self, tuple(str(value) for value in values))

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            for values, total in self._values.items():
                family.add_metric(values, total)
        yield family

    def _add(self, values: tuple[str, ...], amount: float) -> None:
        with self._lock:
            self._values[values] = self._values.get(values, 0.0) + amount


class _Child:
    __slots__ = ("_counter", "_values")

    def __init__(self, counter: PlainCounter, values: tuple[str, ...]) -> None:
        self._counter = counter
        self._values = values

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self._counter._add(self._values, amount)


def named_as_given(text: bytes, names: set[str]) -> bytes:
    """Prometheus text with ``<name>_total`` written ``<name>`` for each of ``names``
    (on its HELP and TYPE lines and its samples)."""
    if not names:
        return text
    alternatives = b"|".join(re.escape(name.encode()) for name in sorted(names))
    pattern = re.compile(rb"^(# HELP |# TYPE )?(" + alternatives + rb")_total(?=[ {])", re.M)
    return pattern.sub(rb"\1\2", text)


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def exposition_app(
    registry: CollectorRegistry,
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """prometheus_client's ASGI exposition of ``registry`` (the format the client
    accepts, gzip when it accepts it, only the ``name[]`` families a query names),
    plain counters named as given."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = {key.decode("latin-1").lower(): value for key, value in scope["headers"]}
        encoder, content_type = choose_encoder(headers.get("accept", b"").decode("latin-1"))
        names = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("name[]")
        body = encoder(registry if names is None else registry.restricted_registry(names))
        if content_type.startswith("text/plain"):
            body = named_as_given(body, _NAMES.get(registry, set()))
        answer = [(b"content-type", content_type.encode())]
        if gzip_accepted(headers.get("accept-encoding", b"").decode("latin-1")):
            body = gzip.compress(body)
            answer.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": answer})
        await send({"type": "http.response.body", "body": body})

    return app
