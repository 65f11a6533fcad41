"""The metrics reference page: every family the metrics port can answer.

The families are produced by the server's own collectors, run on empty sources
(so each family comes out with its name, type, help and label names but no
samples): what the page lists is what the code exposes. tests/docs checks that
every metric name written in src/inferd is on the page, so a collector added
elsewhere is not forgotten here.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import Metric

from inferd.observability import gpu_metrics
from inferd.observability.metrics import ServerCollector, Sources
from inferd.observability.on_demand_metrics import OnDemandCollector
from inferd.observability.stats import ModelStatsTable
from inferd.supervisor import exposition, process_memory
from inferd.supervisor.metrics import answered_gauges

# Sample suffixes each type adds to the family's name in the exposition.
_SUFFIXES = {
    "counter": "`_total`",
    "histogram": "`_bucket`, `_sum`, `_count`",
    "summary": "`_sum`, `_count`",
}

INTRO = """\
# Metrics

Every metric on the metrics port (`metrics_port`, default 8082, path
`metrics_endpoint`, default `/metrics`), generated from the collectors in
`src/inferd/observability` and `src/inferd/supervisor` when the site is built.
A counter's samples are named with `_total`, a histogram's with `_bucket`, `_sum`
and `_count`. The REST metrics' prefix is `metrics_rest_server_prefix`
(`rest_server` by default). With several protocol processes the supervisor answers
one scrape with every process's counters summed: see
[Metrics and tracing](../observability.md).
"""


@dataclass(frozen=True)
class Row:
    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


@dataclass
class _NoLoads:
    loads: Counter[str]
    evictions: Counter[str]


def _rows(families: Iterable[Metric]) -> list[Row]:
    return [
        Row(
            family.name,
            family.type,
            tuple(getattr(family, "_labelnames", ())),
            family.documentation,
        )
        for family in families
    ]


def _exposition_rows(families: Iterable[exposition.Family]) -> list[Row]:
    rows = []
    for family in families:
        help_line = next((line for line in family.header if line.startswith("# HELP ")), "")
        labels: tuple[str, ...] = ()
        for series in family.samples:
            inside = series.partition("{")[2].rstrip("}")
            labels = tuple(pair.split("=", 1)[0] for pair in inside.split(",") if pair)
        rows.append(Row(family.name, family.type, labels, help_line.split(" ", 3)[-1]))
    return rows


def sections() -> list[tuple[str, str, list[Row]]]:
    """(title, when it is exposed, rows), in the order the page shows them."""
    server = _rows(ServerCollector(Sources(ModelStatsTable())).describe())
    on_demand = _rows(OnDemandCollector(_NoLoads(Counter(), Counter())).collect())
    gpu = [
        Row(name, "gauge", gpu_metrics.LABELS, text) for name, text in gpu_metrics.METRICS.items()
    ]
    # This process stands in for a server process: the labels come from a real sample.
    memory = _exposition_rows(process_memory.memory_families([("protocol", os.getpid())]))
    supervisor = _exposition_rows(answered_gauges(0, 0)) + memory
    standard = CollectorRegistry()
    for collector in (ProcessCollector, PlatformCollector, GCCollector):
        collector(registry=standard)
    return [
        ("The server's", "always", server),
        ("Models loaded on request", "with `load_on_request`", on_demand),
        ("GPUs", "where NVML can read a GPU (`pip install 'inferd[gpu]'`)", gpu),
        ("The supervisor's", "with more than one protocol process", supervisor),
        (
            "The Python process",
            "always (prometheus_client's collectors)",
            _rows(standard.collect()),
        ),
    ]


def _row_text(row: Row) -> str:
    labels = ", ".join(f"`{label}`" for label in row.labels) or "none"
    suffix = _SUFFIXES.get(row.kind, "")
    kind = f"{row.kind} ({suffix})" if suffix else row.kind
    text = " ".join(row.help.split()).replace("|", "\\|")
    return f"| `{row.name}` | {kind} | {labels} | {text} |"


def names() -> set[str]:
    return {row.name for _, _, rows in sections() for row in rows}


def page() -> str:
    lines = [INTRO]
    for title, when, rows in sections():
        lines += [f"## {title}", "", f"Exposed {when}.", ""]
        lines += ["| metric | type | labels | what it counts |", "|---|---|---|---|"]
        lines += [_row_text(row) for row in rows]
        lines.append("")
    return "\n".join(lines)
