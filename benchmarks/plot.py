"""``python -m benchmarks plot RESULTS.json OUT.png``: a ``--json-out`` file drawn as
``inferd bench --plot`` draws its steps: throughput against p99 latency, one labelled
point per measured run (a scenario's runs, a ``scale`` window), by the same code
(``inferd.tools.benchreport.plot``; needs ``inferd[bench]``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .options import command_parser

LABEL_KEYS = ("label", "layout", "case", "model", "protocol")


def points(record: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(label, req/s, p99 ms) of every run in a results file that has both figures; a
    command's file of ``--baseline-src`` (pertree.py) holds each tree's record under
    ``figures``, whose runs are labelled with the tree."""
    trees = record.get("figures")
    if isinstance(trees, dict):
        return [
            (f"{tree} {label}", rate, p99)
            for tree, each in trees.items()
            if isinstance(each, dict)
            for label, rate, p99 in points(each)
        ]
    rows = record.get("runs") or record.get("windows") or []
    out = []
    for row in rows:
        if isinstance(row, dict) and "requests_per_s" in row and "p99_ms" in row:
            label = " ".join(str(row[key]) for key in LABEL_KEYS if key in row)
            if row.get("round"):
                label += f" (round {row['round']})"
            out.append((label, float(row["requests_per_s"]), float(row["p99_ms"])))
    return out


def main(argv: Sequence[str]) -> int:
    parser = command_parser("plot", __doc__)
    parser.add_argument("results", type=Path, help="a --json-out file")
    parser.add_argument("png", type=Path, help="the plot to write")
    args = parser.parse_args(argv)
    record = json.loads(args.results.read_text())
    found = points(record)
    if not found:
        command = record.get("setup", {}).get("scenario") or "this file"
        print(f"{args.results}: nothing to draw: no run of {command} has both requests_per_s "
              "and p99_ms (its figures are of another kind; read them in the file)")  # fmt: skip
        return 1
    from inferd.tools.bench import StepResult
    from inferd.tools.benchreport import plot

    @dataclass
    class Point(StepResult):
        name: str = ""

        @property
        def label(self) -> str:
            return self.name

    steps: list[StepResult] = [
        Point(
            concurrency=0,
            rate=0.0,
            requests=0,
            errors=0,
            unsent=0,
            throughput=rate,
            p50_ms=0.0,
            p90_ms=0.0,
            p95_ms=0.0,
            p99_ms=p99,
            mean_ms=0.0,
            server_queue_us=0.0,
            server_compute_us=0.0,
            windows=1,
            stable=True,
            name=label,
        )
        for label, rate, p99 in found
    ]
    scenario = record.get("setup", {}).get("scenario") or args.results.stem
    drawn = plot(steps, args.png, f"python -m benchmarks {scenario}")
    print(f"{args.png}: {drawn} runs")
    return 0
