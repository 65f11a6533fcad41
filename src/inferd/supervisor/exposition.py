"""Prometheus expositions read, merged and written as text, line by line.

The protocol processes' expositions come from one code (observability/metrics.py
through prometheus_client), so the same series is the same text in each: labels
sorted, values escaped alike. A sample is merged by that text (``name{labels}``)
and only its value is read, with one regular expression per line, not parsed
into objects: prometheus_client's parsers took 70-125 ms per process for 50
models (4,500 lines), 0.8-1.5 s per scrape of 12 processes, on the supervisor's
event loop.

How a sample is merged, per family and series:

- counters, histograms (each bucket, ``_sum``, ``_count``), summaries' ``_sum`` and
  ``_count``, and gauges that count something each process holds (streams open,
  requests queued or in progress, memory, file descriptors, a runtime's custom
  gauges: each process runs its own copy of the model) are **summed**;
- gauges that every process reports about the same thing are the **largest**, not
  the sum: ``loaded_models`` and ``model_load_duration_seconds`` (every process loads
  the same models), the GPU gauges (every process reads the same GPUs),
  ``process_max_fds`` (a limit), ``python_info`` and info and state-set metrics (1s);
  so is a summary's quantile, which no sum gives (the largest is an upper bound);
- times something began, ``_created`` samples and ``process_start_time_seconds``,
  are the **earliest**.

Both formats the endpoint negotiates are read and written alike: the Prometheus
text format and OpenMetrics (whose ``# EOF`` ends the merged text once).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

from inferd.observability import gpu_metrics

logger = logging.getLogger(__name__)

# Gauges every process reports about the same thing: the largest, not the sum.
SAME_IN_EVERY_PROCESS = frozenset(
    {
        "loaded_models",
        "model_load_duration_seconds",
        "process_max_fds",
        "python_info",  # 1, labelled with the interpreter's version
        *gpu_metrics.METRICS,
    }
)
EARLIEST = frozenset({"process_start_time_seconds"})
# The samples of each type that only grow while their process lives (a counter's
# ``_created`` is not one; in the text format it is a gauge family of its own).
MONOTONIC_SUFFIXES = {
    "counter": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}
END = "# EOF"
# name, {labels} (quoted values may hold braces, spaces and escaped quotes), value, rest
_SAMPLE = re.compile(r'([^\s{]+)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?[ \t]+(\S+)(.*)')

Combine = Callable[[float, float], float]
Value = tuple[float, str]  # the value, and what followed it on its line (a timestamp)


@dataclass
class Family:
    """One metric family: its comment lines as written, its samples by series."""

    name: str
    type: str = "unknown"
    header: list[str] = field(default_factory=list)
    samples: dict[str, Value] = field(default_factory=dict)  # "name{labels}" -> value

    def copy(self) -> Family:
        return Family(self.name, self.type, list(self.header), dict(self.samples))

    def only(self, names: set[str]) -> Family:
        """This family with the samples of these sample names alone."""
        samples = {
            series: value for series, value in self.samples.items() if sample_name(series) in names
        }
        return Family(self.name, self.type, list(self.header), samples)


Exposition = dict[str, Family]  # by name, in the order written


def read(text: str) -> Exposition:
    """The families of one exposition; ValueError on a line that is no sample."""
    families: Exposition = {}
    current: Family | None = None
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE", "UNIT"):
                current = families.setdefault(parts[2], Family(parts[2]))
                current.header.append(line)
                if parts[1] == "TYPE" and len(parts) == 4:
                    current.type = parts[3].strip()
            continue  # "# EOF" and other comments: the merged text writes its own
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise ValueError(f"not a sample line: {line[:200]!r}")
        name, labels, value, rest = match.groups()
        if current is None or not name.startswith(current.name):
            current = families.setdefault(name, Family(name))  # a sample with no family
        current.samples[name + (labels or "")] = (float(value), rest)
    return families


def write(families: Iterable[Family], openmetrics: bool) -> str:
    lines: list[str] = []
    for family in families:
        lines += family.header
        lines += [
            f"{series} {floatToGoString(v)}{rest}" for series, (v, rest) in family.samples.items()
        ]
    if openmetrics:
        lines.append(END)
    return "\n".join(lines) + "\n" if lines else ""


def sample_name(series: str) -> str:
    return series.partition("{")[0]


def combine_rule(family: Family, series: str) -> Combine:
    """How two processes' values of ``series`` (of ``family``) make the server's."""
    name = sample_name(series)
    if name.endswith("_created") or family.name in EARLIEST:
        return min
    if family.type in ("info", "stateset") or family.name in SAME_IN_EVERY_PROCESS:
        return max
    if family.type == "summary" and name == family.name:  # a quantile
        return max
    return _add


def _add(a: float, b: float) -> float:
    return a + b


def merge(expositions: Iterable[Exposition]) -> Exposition:
    """Several processes' expositions as one server's: each family in the order first
    seen, each series merged by :func:`combine_rule`. A family whose type differs
    from the first process's is left out of the sum, and logged."""
    merged: Exposition = {}
    for families in expositions:
        for name, family in families.items():
            into = merged.get(name)
            if into is None:
                merged[name] = family.copy()
            elif into.type != family.type:
                logger.warning("Metric %s is a %s in one protocol process and a %s in another; "
                               "only the %ss are summed", name, into.type, family.type,
                               into.type)  # fmt: skip
            else:
                _add_samples(into, family)
    return merged


def _add_samples(into: Family, family: Family) -> None:
    for series, (value, rest) in family.samples.items():
        seen = into.samples.get(series)
        if seen is None:
            into.samples[series] = (value, rest)
        else:
            into.samples[series] = (combine_rule(into, series)(seen[0], value), seen[1])


def monotonic_part(families: Exposition) -> Exposition:
    """The counts of one exposition that a restart of its process would take back."""
    kept: Exposition = {}
    for name, family in families.items():
        names = {name + suffix for suffix in MONOTONIC_SUFFIXES.get(family.type, ())}
        if family.type == "counter" and not name.endswith("_total"):
            # OpenMetrics: the family is named without it; a Triton counter has none.
            names = {name, name + "_total"}
        counts = family.only(names)
        if counts.samples:
            kept[name] = counts
    return kept


def gauge(name: str, help_text: str, value: float) -> Family:
    """A family of one unlabelled gauge, as prometheus_client writes it in both formats."""
    header = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    return Family(name, "gauge", header, {name: (float(value), "")})


def first_value(families: Exposition, name: str) -> float | None:
    family = families.get(name)
    if family is None or not family.samples:
        return None
    return next(iter(family.samples.values()))[0]
