"""``inferd bench`` results as a table, CSV, JSON and a PNG plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from inferd.tools.bench import StepResult, as_rows

COLUMNS = (
    ("step", 9, lambda r: r.label),
    ("req/s", 9, lambda r: f"{r.throughput:.0f}"),
    ("p50 ms", 8, lambda r: f"{r.p50_ms:.2f}"),
    ("p90 ms", 8, lambda r: f"{r.p90_ms:.2f}"),
    ("p95 ms", 8, lambda r: f"{r.p95_ms:.2f}"),
    ("p99 ms", 8, lambda r: f"{r.p99_ms:.2f}"),
    ("queue us", 9, lambda r: f"{r.server_queue_us:.0f}"),
    ("compute us", 11, lambda r: f"{r.server_compute_us:.0f}"),
    ("client us", 10, lambda r: f"{r.client_cpu_us:.0f}"),
    ("errors", 7, lambda r: str(r.errors + r.unsent)),
    ("stable", 6, lambda r: "yes" if r.stable else "no"),
)


def table(results: list[StepResult]) -> str:
    """A fixed-width table, one line per step (server times: per request, from its stats)."""
    head = " ".join(name.rjust(width) for name, width, _ in COLUMNS)
    lines = [head]
    for result in results:
        lines.append(" ".join(value(result).rjust(width) for _, width, value in COLUMNS))
    return "\n".join(lines)


def write_csv(results: list[StepResult], path: Path) -> None:
    rows = as_rows(results)
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else ["concurrency"])
        writer.writeheader()
        writer.writerows(rows)


def write_json(results: list[StepResult], path: Path) -> None:
    path.write_text(json.dumps(as_rows(results), indent=2) + "\n")


def plot(results: list[StepResult], path: Path, title: str) -> int:
    """Throughput against p99 latency, one labelled point per step; returns the points."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "inferd bench --plot needs matplotlib: pip install 'inferd[bench]'"
        ) from None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    latency = [result.p99_ms for result in results]
    throughput = [result.throughput for result in results]
    [line] = axes.plot(latency, throughput, marker="o")
    for result in results:
        axes.annotate(
            result.label,
            (result.p99_ms, result.throughput),
            fontsize=8,
            textcoords="offset points",
            xytext=(4, 4),
        )
    axes.set_xlabel("p99 latency (ms)")
    axes.set_ylabel("throughput (requests/s)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return len(np.asarray(line.get_xdata()))
