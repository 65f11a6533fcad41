"""``metrics_port`` when ``protocol_processes`` > 1: the protocol processes' metrics, summed.

Each protocol process serves its own Prometheus registry (observability/metrics.py)
on its private ``metrics-<i>.sock``; the supervisor serves ``metrics_endpoint`` on
the public ``metrics_port`` by asking every one of them and merging the answers
into one exposition, so one scrape gives the server's totals.

How a sample is merged, per metric name and label set:

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

A process that does not answer (restarting, or too busy within ``SCRAPE_TIMEOUT_S``)
is left out and logged; the answer's ``protocol_processes_answered`` gauge says how
many are in it, beside ``protocol_processes``, how many there are. Its counts are
not: the counters stay whole (never lower than the last answer) while a process is
missing or after it restarted, see :class:`Totals`. Children are asked
for OpenMetrics, whose parser keeps each family whole (a counter's ``_created`` stays
in its family), and the answer is negotiated with the scraper as one server's is
(text format or OpenMetrics, gzip, ``name[]``), by prometheus_client's own app.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, make_asgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from inferd.observability import gpu_metrics
from inferd.observability.metrics import ASGIApp, Receive, Scope, Send, endpoint_app
from inferd.supervisor.fanout import Answer, fan_out
from inferd.supervisor.paths import PrivatePaths

logger = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 5.0  # a protocol process busier than this is left out of one answer
ANSWERED = "protocol_processes_answered"
EXPECTED = "protocol_processes"
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
# What the children are asked for: OpenMetrics, not compressed (a local socket).
_ASK = {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "identity"}

Combine = Callable[[float, float], float]
SampleKey = tuple[str, tuple[tuple[str, str], ...]]


def _add(a: float, b: float) -> float:
    return a + b


def combine_rule(family: Metric, sample: Sample) -> Combine:
    """How two processes' values of ``sample`` (of ``family``) make the server's."""
    if sample.name == family.name + "_created" or family.name in EARLIEST:
        return min
    if family.type in ("info", "stateset") or family.name in SAME_IN_EVERY_PROCESS:
        return max
    if "quantile" in sample.labels:
        return max
    return _add


@dataclass
class _Family:
    """One metric family being merged: the first process's description, samples by key."""

    first: Metric
    samples: dict[SampleKey, Sample] = field(default_factory=dict)

    def add(self, samples: Iterable[Sample]) -> None:
        for sample in samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            seen = self.samples.get(key)
            if seen is None:
                self.samples[key] = sample
                continue
            value = combine_rule(self.first, sample)(seen.value, sample.value)
            self.samples[key] = seen._replace(value=value)

    def metric(self) -> Metric:
        merged = Metric(self.first.name, self.first.documentation, self.first.type,
                        self.first.unit)  # fmt: skip
        merged.samples = list(self.samples.values())
        return merged


def merge(expositions: Iterable[Iterable[Metric]]) -> list[Metric]:
    """The families of several processes' expositions as one server's: each family in
    the order first seen, each sample (name and labels) merged by :func:`combine_rule`.
    A family whose type differs from the first process's is left out of the sum."""
    families: dict[str, _Family] = {}
    for exposition in expositions:
        for metric in exposition:
            family = families.setdefault(metric.name, _Family(metric))
            if family.first.type != metric.type:
                logger.warning("Metric %s is a %s in one protocol process and a %s in another; "
                               "only the %ss are summed", metric.name, family.first.type,
                               metric.type, family.first.type)  # fmt: skip
                continue
            family.add(metric.samples)
    return [family.metric() for family in families.values()]


def parse(answer: Answer) -> list[Metric] | None:
    """One process's families, or None (logged) when it gave none."""
    if not answer.ok:
        why = answer.error or f"HTTP {answer.status}: {answer.body[:200]!r}"
        logger.warning("Protocol process metrics at %s left out: %s", answer.socket, why)
        return None
    try:
        return list(text_string_to_metric_families(answer.body.decode()))
    except (ValueError, UnicodeDecodeError) as error:
        logger.warning("Protocol process metrics at %s left out: %s", answer.socket, error)
        return None


def answered_gauges(answered: int, expected: int) -> list[Metric]:
    """Whether this answer holds the whole server: how many processes it sums, of how many."""
    return [
        GaugeMetricFamily(EXPECTED, "Protocol processes the server runs", value=expected),
        GaugeMetricFamily(
            ANSWERED,
            "Protocol processes whose metrics this answer sums (fewer than "
            "protocol_processes: the others did not answer, and their counts are missing)",
            value=answered,
        ),
    ]


# The samples of each type that only grow while their process lives.
MONOTONIC = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}
START_TIME = "process_start_time_seconds"


def monotonic_part(families: Iterable[Metric]) -> list[Metric]:
    """The counts of one exposition that a restart of its process would take back."""
    kept = []
    for metric in families:
        names = {metric.name + suffix for suffix in MONOTONIC.get(metric.type, ())}
        samples = [sample for sample in metric.samples if sample.name in names]
        if samples:
            counts = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            counts.samples = samples
            kept.append(counts)
    return kept


def start_time(families: Iterable[Metric]) -> float | None:
    for metric in families:
        if metric.name == START_TIME and metric.samples:
            return float(metric.samples[0].value)
    return None


@dataclass
class _Seen:
    started: float | None
    counts: list[Metric]


class Totals:
    """Keeps the server's counters from going down when a protocol process restarts or
    misses a scrape: Prometheus reads any drop as a reset, and its ``rate`` would count
    the whole total again. A process that does not answer is counted with what it had
    at its last answer; one whose ``process_start_time_seconds`` changed (restarted,
    its counts from zero) has what it had before kept in ``retired``, added to every
    later answer. Counts since a process's last answer before it died are lost."""

    def __init__(self) -> None:
        self._seen: dict[int, _Seen] = {}
        self._retired: list[Metric] = []

    def expositions(self, parsed: Sequence[list[Metric] | None]) -> list[list[Metric]]:
        """What to merge for one answer, from each process's families (None: no answer)."""
        merged: list[list[Metric]] = []
        for index, families in enumerate(parsed):
            seen = self._seen.get(index)
            if families is None:
                if seen is not None:
                    merged.append(seen.counts)
                continue
            started = start_time(families)
            if seen is not None and started is not None and started != seen.started:
                self._retired = merge([self._retired, seen.counts])
            self._seen[index] = _Seen(started, monotonic_part(families))
            merged.append(families)
        return [*merged, self._retired]


def server_metrics(answers: Sequence[Answer], totals: Totals | None = None) -> list[Metric]:
    """The merged families of ``answers`` (one per protocol process, in index order) and
    how many answered; with ``totals``, counters kept whole across restarts."""
    parsed = [parse(answer) for answer in answers]
    answered = sum(families is not None for families in parsed)
    if totals is None:
        expositions = [families for families in parsed if families is not None]
    else:
        expositions = totals.expositions(parsed)
    ours = answered_gauges(answered, len(answers))
    names = {metric.name for metric in ours}
    merged = [metric for metric in merge(expositions) if metric.name not in names]
    return merged + ours


class _Snapshot(Collector):
    """One scrape's merged families, served through prometheus_client's own app."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def build_metrics_app(
    paths: PrivatePaths, count: int, endpoint: str, timeout_s: float = SCRAPE_TIMEOUT_S
) -> ASGIApp:
    """The app the supervisor serves on ``metrics_port``: ``endpoint`` answers the sum of
    protocol processes 0 to ``count``-1, each asked at the same ``endpoint`` on its
    ``metrics-<i>.sock``; any other path is a 404 that says where."""
    sockets = [paths.metrics(index) for index in range(count)]
    path = "/" + endpoint.strip("/")
    totals = Totals()

    async def scrape(scope: Scope, receive: Receive, send: Send) -> None:
        answers = await fan_out(sockets, "GET", path, headers=_ASK, timeout_s=timeout_s)
        registry = CollectorRegistry(auto_describe=True)  # names known, for name[]
        registry.register(_Snapshot(server_metrics(answers, totals)))
        await make_asgi_app(registry)(scope, receive, send)

    return endpoint_app(endpoint, scrape)
