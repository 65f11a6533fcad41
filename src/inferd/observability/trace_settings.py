"""Triton's trace extension: which inference requests are traced, server-wide and per model.

The settings, under Triton's names and in its wire form (every value a string,
``trace_level`` a list of them):

- ``trace_level``: ``["OFF"]``, or ``TIMESTAMPS`` and/or ``TENSORS``: an inference
  request is traced (its OpenTelemetry span and the model's work under it,
  observability/tracing.py). inferd's spans hold timings: ``TENSORS`` traces as
  ``TIMESTAMPS`` does, tensors are not recorded;
- ``trace_rate``: one request of every ``trace_rate`` is traced (the rate-th, as Triton);
- ``trace_count``: how many more requests are traced; ``-1``: no limit;
- ``log_frequency``, ``trace_file``: Triton's trace file, which inferd does not write
  (spans go to the OTLP endpoint): kept and answered, the file never set by a client.

The server's settings start from its own (traced when tracing is on:
``TIMESTAMPS``, every request; else ``OFF``); a model's settings are the fields set
for it, the others following the server's as they change. A field set to null
goes back: a model's to the server's, the server's to its start. As in Triton, a
change starts its settings' counting anew (the rate's and the count's).

:class:`TraceSettings` holds one process's settings and counts; changes reach every
protocol process as one server-wide operation (serving/operations.py
``ChangeTraceSettings``), so each process traces by the same settings and counts
its own requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferd.errors import InvalidRequest

LEVEL, RATE, COUNT = "trace_level", "trace_rate", "trace_count"
FREQUENCY, FILE, MODE = "log_frequency", "trace_file", "trace_mode"
FIELDS = (LEVEL, RATE, COUNT, FREQUENCY, FILE)
LEVELS = ("TIMESTAMPS", "TENSORS")
OFF = "OFF"
# How inferd traces: OpenTelemetry spans, as Triton's "opentelemetry" trace mode.
TRACE_MODE = "opentelemetry"
SERVER = ""  # the server's settings, where a model's name would be
_UINT32_MAX = 2**32 - 1
_INT32_MAX = 2**31 - 1
TRACING_OFF = (
    "Tracing is off on this server, so no request can be traced: set tracing_server "
    "(or OTEL_EXPORTER_OTLP_ENDPOINT) to export traces, then set trace_level"
)


def parse_changes(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A trace settings request's changes, each field checked, in the wire form
    (None: clear it); InvalidRequest naming what is wrong, in Triton's words."""
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        if key == MODE:
            continue  # what a GET answers, sent back as it came: nothing to change
        if key == FILE:
            raise InvalidRequest(
                "trace file location can not be updated through network protocol "
                "(inferd writes no trace file: spans go to the OTLP endpoint)"
            )
        if key not in FIELDS:
            raise InvalidRequest(
                f"Unknown trace setting {key!r}: the settings are {', '.join(FIELDS[:-1])}"
            )
        changes[key] = None if value is None else _parsed(key, value)
    return changes


def _parsed(key: str, value: Any) -> Any:
    if key == LEVEL:
        return _levels(value)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]  # gRPC sends every value as a list
    lowest, highest = {RATE: (1, _UINT32_MAX), COUNT: (-1, _INT32_MAX)}.get(key, (0, _UINT32_MAX))
    try:
        number = (
            int(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
        )
    except ValueError:
        number = None
    if number is None:
        raise InvalidRequest(f"Unable to parse '{key}', got: {value!r}")
    if not lowest <= number <= highest:
        raise InvalidRequest(
            f"Unable to parse '{key}', value is out of range [ {lowest}, {highest} ], got: {value}"
        )
    return str(number)


def _levels(value: Any) -> list[str]:
    levels = [value] if isinstance(value, str) else value
    if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
        raise InvalidRequest(f"'{LEVEL}' must be a list of strings, got: {value!r}")
    if OFF in levels and len(levels) != 1:
        raise InvalidRequest("Expect only one trace level 'OFF' is specified")
    unknown = [level for level in levels if level not in (OFF, *LEVELS)]
    if unknown or not levels:
        raise InvalidRequest(
            f"Unknown trace level {unknown[0] if unknown else 'none'!r}: use 'OFF', or any of "
            f"{', '.join(LEVELS)}"
        )
    return [level for level in LEVELS if level in levels] or [OFF]


class _InForce:
    """One set of settings in force (the server's, or a model's) and its counts."""

    __slots__ = ("every", "on", "remaining", "seen", "values")

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.on = values[LEVEL] != [OFF]
        self.every = int(values[RATE])
        self.remaining = int(values[COUNT])
        self.seen = 0

    def sample(self) -> bool:
        """Whether this request is traced: the rate-th, while the count lasts."""
        if not self.on or self.remaining == 0:
            return False
        self.seen += 1
        if self.seen % self.every:
            return False
        if self.remaining > 0:
            self.remaining -= 1
        return True


class TraceSettings:
    """The trace settings of one process: the server's, each model's, and their counts."""

    def __init__(self, tracing: bool) -> None:
        """``tracing``: whether the server exports traces (its settings then start
        with every inference request traced)."""
        self.tracing = tracing
        self._start: dict[str, Any] = {
            LEVEL: [LEVELS[0]] if tracing else [OFF],
            RATE: "1" if tracing else "1000",
            COUNT: "-1",
            FREQUENCY: "0",
            FILE: "",
        }
        self._set: dict[str, dict[str, Any]] = {SERVER: {}}  # the fields set, by scope
        self._in_force: dict[str, _InForce] = {SERVER: _InForce(self._values(SERVER))}

    def change(self, model: str, changes: Mapping[str, Any], whole: bool = False) -> None:
        """Apply ``changes`` (checked by :func:`parse_changes`) to ``model``'s settings
        (SERVER: the server's); ``whole``: they are all its fields set (a replay)."""
        level = changes.get(LEVEL)
        if not self.tracing and level is not None and level != [OFF]:
            raise InvalidRequest(TRACING_OFF)
        fields = {} if whole else dict(self._set.get(model, {}))
        for key, value in changes.items():
            if value is None:
                fields.pop(key, None)
            else:
                fields[key] = value
        if model == SERVER or fields:
            self._set[model] = fields
        else:
            self._set.pop(model, None)  # nothing set: it follows the server's
        for scope in [model] if model != SERVER else list(self._set):
            if scope in self._set:
                self._in_force[scope] = _InForce(self._values(scope))
            else:
                self._in_force.pop(scope, None)

    def answer(self, model: str = SERVER) -> dict[str, Any]:
        """``model``'s settings in force (SERVER: the server's), as Triton answers them:
        the count is what is left of it."""
        in_force = self._in_force.get(model) or self._in_force[SERVER]
        return {**in_force.values, COUNT: str(in_force.remaining), MODE: TRACE_MODE}

    def fields_set(self, model: str = SERVER) -> dict[str, Any]:
        """The fields set for ``model`` (SERVER: the server's), as changes that set them."""
        return dict(self._set.get(model, {}))

    def sample(self, model: str) -> bool:
        """Whether an inference request of ``model`` is traced (counted as one seen)."""
        return (self._in_force.get(model) or self._in_force[SERVER]).sample()

    def _values(self, scope: str) -> dict[str, Any]:
        values = {**self._start, **self._set[SERVER]}
        return values if scope == SERVER else {**values, **self._set[scope]}
