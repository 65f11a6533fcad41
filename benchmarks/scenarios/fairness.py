"""Tail latency at parallel_workers 0: p99 against p50 at 64 connections, batching or not."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..repository import write_sklearn_model
from ..servers import Contender, with_baseline
from .base import Case
from .rest import Batching, Rest

# The model-settings fields of each mode; the batching mode is the batching scenario's.
MODES: Mapping[str, Mapping[str, Any]] = {"plain": {}, "batching": Batching.model_fields}
# The bar: every connection served about as often as the others.
FAIR_RATIO = 4.0


class Fairness(Rest):
    name = "fairness"
    description = f"""Fair tails in-process: p99 vs p50 with parallel_workers 0 (wrk).

The iris model served in the main process (the event loop runs predict), at 64
connections, without and with adaptive batching ({dict(Batching.model_fields)}).
Every run opens its connections at once; a server that takes them one per turn
of a busy event loop answers the last ones' first requests last (wrk counts
latency from a connection's first write, and corrects for coordinated omission,
so a few very late first answers weigh on p99). The notes give p99/p50 for each
server; the bar is {FAIR_RATIO:g}x."""
    defaults = {"connections": [64], "parallel_workers": 0}

    def cases(self) -> list[Case]:
        contenders = tuple(with_baseline(self.contenders(), self.options.baseline_src))
        return [
            Case(f"{mode} c{n}", contenders, self.load(n), self.model)
            for mode in MODES
            for n in self.options.connections
        ]

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        fields = MODES[mode_of(case.name)]
        write_sklearn_model(repo, self.model, self.estimator, fields=fields)

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        lines = []
        for case, rows in summary.items():
            for label, row in rows.items():
                p50, p99 = row["p50_ms"], row["p99_ms"]
                ratio = p99 / p50 if p50 else float("inf")
                verdict = "ok" if ratio <= FAIR_RATIO else f"over {FAIR_RATIO:g}x"
                lines.append(
                    f"{case} {label}: p99/p50 {ratio:.1f} "
                    f"(p50 {p50:.1f} ms, p99 {p99:.1f} ms) {verdict}"
                )
        return lines


def mode_of(case_name: str) -> str:
    """The mode a case runs (its name's first word: ``batching c64`` -> batching)."""
    return case_name.split()[0]
