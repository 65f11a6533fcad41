"""The scale benchmark's records, their medians over rounds, and the markdown tables.

One table per model and protocol, as in issue 27: each layout's total req/s, the
share of the ceiling it reaches (the best shared-nothing layout of the same
model and protocol), p99, the cores its servers kept busy, and how busy its
busiest process was (a share of one core: at 100% that process is the limit; the
main process of a one-process server, a protocol process of a supervised one).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..results import median_or_none
from .cpu import CpuWindow
from .load import Outcome
from .options import Layout


@dataclass(frozen=True)
class WindowRecord:
    """One measured window of one layout, model and protocol."""

    round: int
    layout: str
    servers: int
    replicas: bool
    model: str
    protocol: str
    requests: int
    requests_per_s: float  # the sum over the layout's servers
    p50_ms: float  # the median of the servers' p50
    p99_ms: float  # the worst server's p99
    errors: int  # non-2xx, socket errors and wrong answers, all servers
    cores_busy: float
    main_share: float  # the busiest main process, a share of one core
    cpu_us_per_request: float | None  # all the servers' CPU: steadier than req/s when shared
    machine_cores_busy: float | None
    window_s: float
    per_server: list[dict[str, Any]] = field(default_factory=list)
    busiest_share: float | None = None  # the busiest process of any server (None: unread)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_record(
    round_index: int,
    layout: Layout,
    model: str,
    protocol: str,
    outcomes: Sequence[Outcome],
    cpu: CpuWindow,
) -> WindowRecord:
    results = [outcome.result for outcome in outcomes]
    requests = sum(r.requests for r in results)
    per_server = [
        outcome.result.to_dict()
        | {"wrong": outcome.wrong, "cpu_s": group, "main_cpu_s": main, "busiest_cpu_s": most}
        for outcome, group, main, most in zip(
            outcomes, cpu.group_s, cpu.main_s, cpu.busiest_s or cpu.main_s, strict=True
        )
    ]
    return WindowRecord(
        round=round_index,
        layout=layout.label,
        servers=layout.servers,
        replicas=layout.replicas,
        model=model,
        protocol=protocol,
        requests=requests,
        requests_per_s=sum(r.requests_per_s for r in results),
        p50_ms=float(statistics.median(r.p50_ms for r in results)),
        p99_ms=max(r.p99_ms for r in results),
        errors=sum(outcome.errors for outcome in outcomes),
        cores_busy=cpu.cores_busy,
        main_share=cpu.busiest_main_share,
        cpu_us_per_request=sum(cpu.group_s) / requests * 1e6 if requests else None,
        machine_cores_busy=cpu.machine_cores_busy,
        window_s=cpu.seconds,
        per_server=per_server,
        busiest_share=cpu.busiest_share,
    )


@dataclass(frozen=True)
class Row:
    """A layout's medians over rounds, for one model and protocol."""

    layout: str
    replicas: bool
    rounds: int
    requests_per_s: float
    p99_ms: float
    cores_busy: float
    main_share: float
    cpu_us_per_request: float | None
    errors: int
    busiest_share: float  # the busiest process (main process where none was read)


def summarize(records: Iterable[WindowRecord]) -> dict[tuple[str, str], list[Row]]:
    """(model, protocol) -> one row per layout, in the order they first ran."""
    grouped: dict[tuple[str, str], dict[str, list[WindowRecord]]] = {}
    for record in records:
        table = grouped.setdefault((record.model, record.protocol), {})
        table.setdefault(record.layout, []).append(record)
    return {key: [_row(runs) for runs in table.values()] for key, table in grouped.items()}


def _row(runs: Sequence[WindowRecord]) -> Row:
    def median(name: str) -> float:
        return float(statistics.median(getattr(run, name) for run in runs))

    return Row(
        layout=runs[0].layout,
        replicas=runs[0].replicas,
        rounds=len(runs),
        requests_per_s=median("requests_per_s"),
        p99_ms=median("p99_ms"),
        cores_busy=median("cores_busy"),
        main_share=median("main_share"),
        cpu_us_per_request=median_or_none(run.cpu_us_per_request for run in runs),
        errors=sum(run.errors for run in runs),
        busiest_share=float(statistics.median(busiest(run) for run in runs)),
    )


def busiest(record: WindowRecord) -> float:
    return record.main_share if record.busiest_share is None else record.busiest_share


def ceiling(rows: Sequence[Row]) -> float | None:
    """The best shared-nothing layout's req/s; None without one."""
    return max((row.requests_per_s for row in rows if row.replicas), default=None)


def markdown_table(rows: Sequence[Row]) -> list[str]:
    top = ceiling(rows)
    lines = [
        "| servers x parallel_workers | req/s | of the ceiling | p99 ms | cores busy "
        "| busiest process, share of one core | CPU us/req | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        share = f"{row.requests_per_s / top:.2f}" if top else "-"
        rate = f"{row.requests_per_s:,.0f}"
        cpu = "-" if row.cpu_us_per_request is None else f"{row.cpu_us_per_request:,.0f}"
        if row.requests_per_s == top:
            rate = f"**{rate}**"
        lines.append(
            f"| {row.layout}{' (replicas)' if row.replicas else ''} | {rate} | {share} "
            f"| {row.p99_ms:.1f} | {row.cores_busy:.1f} | {row.busiest_share:.0%} "
            f"| {cpu} | {row.errors} |"
        )
    return lines


def markdown(
    summary: dict[tuple[str, str], list[Row]], titles: dict[str, str], rounds: int
) -> list[str]:
    """Every table, each under its model and protocol (nothing if no window ran)."""
    if not summary:
        return ["", "No window was measured."]
    lines: list[str] = []
    for (model, protocol), rows in summary.items():
        lines += ["", f"{titles.get(model, model)}, {protocol.upper()}:", ""]
        lines += markdown_table(rows)
    lines += ["", LEGEND + (f" Medians over {rounds} rounds." if rounds > 1 else "")]
    return lines


LEGEND = (
    "req/s: all the layout's servers together; of the ceiling: over the best replicas "
    "layout (bold); p99: the worst server's; cores busy: CPU of every server process "
    "over the window; busiest process: the busiest process of any server (a one-process "
    "server's main process, or one of its workers; a protocol process); CPU us/req: the "
    "servers' CPU per answer (the steadier figure when other work shares the cores); "
    "errors: non-2xx, socket errors and answers that were not the checked answer."
)


def machine_line(records: Sequence[WindowRecord], cpus: int, load: Sequence[float]) -> str:
    """How busy the whole machine was: other work on a shared machine shows here."""
    averages = "/".join(f"{value:.1f}" for value in load)
    line = f"Machine: {cpus} CPUs, load average {averages} at the start"
    busy = [r.machine_cores_busy for r in records if r.machine_cores_busy is not None]
    if busy:
        line += (
            f"; all its processes kept {min(busy):.1f}-{max(busy):.1f} cores busy in the windows"
        )
    return line + "."


def run_line(record: WindowRecord) -> str:
    """A window's console line."""
    machine = record.machine_cores_busy
    return (
        f"  {record.layout:<20} {record.model:<6} {record.protocol:<5}"
        f"{record.requests_per_s:10.1f} req/s  p99 {record.p99_ms:7.1f} ms  "
        f"cores busy {record.cores_busy:5.2f}  busiest {busiest(record):4.0%}  "
        f"errors {record.errors}"
        + (f"  (machine: {machine:.1f} cores busy)" if machine is not None else "")
    )
