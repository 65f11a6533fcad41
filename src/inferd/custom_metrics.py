"""Custom metrics from a runtime, exported on the server's Prometheus endpoint.

``register`` a counter, gauge or histogram (in ``load``, or on first use), then
``log`` values from ``predict``; each value is labelled with the model's name and
version (``model_name``, ``model_version``)::

    from inferd import custom_metrics
    class MyModel(Model):
        async def load(self) -> bool:
            custom_metrics.register("tokens_generated", "Tokens generated", kind="counter")
            return True

        def predict(self, request):
            ...
            custom_metrics.log(tokens_generated=len(tokens), prompt_length=len(prompt))

A name logged without being registered is a histogram, as in MLServer's
``mlserver.log``. In a worker process, values are buffered and travel to the main
process with the next reply the worker sends (so a value logged in ``predict`` is
on the endpoint by the time its response is), without files on disk. This module
does not import prometheus_client: workers stay light.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

KINDS = ("counter", "gauge", "histogram")
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

# (model name, model version or ""): the labels of values logged now.
ModelLabels = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    kind: str
    description: str
    buckets: tuple[float, ...] | None = None
    # The label names its values carry; empty: the model's (model_name, model_version).
    labelnames: tuple[str, ...] = ()
    # False: a counter exposed under its own name, without Prometheus' "_total" (Triton's).
    total_suffix: bool = True


# One logged value: metric name, its label values, value.
Record = tuple[str, tuple[str, ...], float]
Shipment = tuple[list[Definition], list[Record]]
Sink = Callable[[list[Definition], list[Record]], None]

_model: ContextVar[ModelLabels | None] = ContextVar("inferd_custom_metrics_model", default=None)


class _State:
    """Definitions seen in this process, and where logged values go.

    In the main process they go straight to ``sink`` (the Prometheus side), or
    nowhere when metrics are off. In a worker they are buffered until ``take``.
    """

    def __init__(self) -> None:
        # Runtimes may log from several threads (threads_per_worker > 1).
        self.lock = threading.Lock()
        self.definitions: dict[str, Definition] = {}
        self.unsent: list[Definition] = []
        self.records: list[Record] = []
        self.sink: Sink | None = None
        self.buffering = False


_state = _State()


def register(
    name: str,
    description: str = "",
    kind: str = "histogram",
    buckets: list[float] | tuple[float, ...] | None = None,
    labelnames: tuple[str, ...] = (),
    total_suffix: bool = True,
) -> None:
    """Declare a metric (again is fine, if it is declared the same way).

    ``kind`` is ``"counter"`` (``log`` adds the value), ``"gauge"`` (``log`` sets
    it) or ``"histogram"`` (``log`` observes it; ``buckets`` are its upper bounds,
    Prometheus' defaults if not given). ``labelnames``: labels of its own, logged
    with :func:`log_labelled`, instead of the model's.
    """
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(
            f"Invalid metric name {name!r}: use letters, digits, '_' and ':', "
            "not starting with a digit (e.g. 'tokens_generated')"
        )
    if kind not in KINDS:
        raise ValueError(f"Invalid metric kind {kind!r} for {name!r}: use one of {KINDS}")
    if buckets is not None and kind != "histogram":
        raise ValueError(f"Metric {name!r}: buckets are for histograms only, not a {kind}")
    definition = Definition(
        name, kind, description, tuple(buckets) if buckets else None, labelnames, total_suffix
    )
    with _state.lock:
        known = _state.definitions.get(name)
        if known is not None:
            if known.kind != kind:
                raise ValueError(f"Metric {name!r} is already registered as a {known.kind}")
            if known.labelnames != labelnames:
                raise ValueError(
                    f"Metric {name!r} is already registered with labels {known.labelnames}"
                )
            return
        _state.definitions[name] = definition
        _publish(definition)


def log(**values: float) -> None:
    """Record ``name=value`` for each keyword, labelled with the current model.

    Call it from a model's ``load`` or ``predict`` (a thread the model starts
    itself must run with ``contextvars.copy_context()`` to know the model).
    """
    labels = _model.get()
    if labels is None:
        raise RuntimeError(
            "inferd.custom_metrics.log() was called outside a model's load() or predict(), "
            "so there is no model to label the values with; call it from there"
        )
    for name, value in values.items():
        if name not in _state.definitions:
            register(name, f"Custom metric {name} logged by a model")
        number = _number(name, value)
        if number < 0 and _state.definitions[name].kind == "counter":
            raise ValueError(f"Counter {name!r} can only go up; got {number}")
        _record((name, labels, number))


def log_labelled(name: str, labels: tuple[str, ...], value: float) -> None:
    """Record ``value`` for a metric registered with ``labelnames``, with those labels'
    values (in their order); from anywhere, a model's context or not."""
    definition = _state.definitions.get(name)
    if definition is None or len(definition.labelnames) != len(labels):
        raise ValueError(f"Metric {name!r} is not registered with {len(labels)} label names")
    _record((name, tuple(labels), _number(name, value)))


def _number(name: str, value: Any) -> float:
    """``value`` as a float: ints, floats, numpy scalars; not text."""
    if not isinstance(value, str | bytes):
        with contextlib.suppress(TypeError, ValueError):
            return float(value)
    raise TypeError(f"Metric {name!r} needs a number, got {type(value).__name__}: {value!r}")


def _publish(definition: Definition) -> None:
    """Send a new definition on (lock held)."""
    if _state.buffering:
        _state.unsent.append(definition)
    elif _state.sink is not None:
        _state.sink([definition], [])


def _record(record: Record) -> None:
    if _state.buffering:
        with _state.lock:
            _state.records.append(record)
    elif _state.sink is not None:
        _state.sink([], [record])


# The server's side: where values go, and whose they are.


def set_model(labels: ModelLabels) -> Token[ModelLabels | None]:
    """Label what is logged from here on (in this context) with ``labels``."""
    return _model.set(labels)


def reset_model(token: Token[ModelLabels | None]) -> None:
    _model.reset(token)


def model_labels(name: str, version: str | None) -> ModelLabels:
    return (name, version or "")


def set_sink(sink: Sink | None) -> None:
    """Main process: deliver definitions and values to ``sink`` (None drops them).

    Definitions registered before are delivered at once.
    """
    with _state.lock:
        _state.sink = sink
        if sink is not None and _state.definitions:
            sink(list(_state.definitions.values()), [])


def start_buffering() -> None:
    """Worker process: keep definitions and values until :func:`take`."""
    with _state.lock:
        _state.buffering = True


def take() -> Shipment | None:
    """Worker process: what was registered and logged since the last call, if any."""
    if not _state.records and not _state.unsent:
        return None
    with _state.lock:
        shipment = (_state.unsent, _state.records)
        _state.unsent, _state.records = [], []
    return shipment


def deliver(shipment: Shipment) -> None:
    """Main process: apply what a worker shipped."""
    if _state.sink is not None:
        _state.sink(*shipment)
