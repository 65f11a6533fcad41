"""Models that call models: what one BLS call and one ensemble step cost."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.serverproc import ServerProcess

from ..composition import (
    BLS,
    CLIENT_TWO,
    DIRECT,
    ENSEMBLE,
    WAYS,
    CompositionLoad,
    CompositionTarget,
    check_once,
)
from ..loadgen import Target
from ..servers import BASELINE_SUFFIX, INFERD, Contender, baseline_pairs, with_baseline
from .base import Case, Scenario, VerificationError

MODELS = Path(__file__).resolve().parents[2] / "tests" / "e2e" / "triton_models"

# Two add_sub steps: the first's sum is both inputs of the second (its OUTPUT1 is INT32).
ADD_SUB_TWICE = """name: "add_sub_twice"
platform: "ensemble"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "add_sub"
      model_version: -1
      input_map { key: "INPUT0" value: "INPUT0" }
      input_map { key: "INPUT1" value: "INPUT1" }
      output_map { key: "OUTPUT0" value: "SUM" }
    },
    {
      model_name: "add_sub"
      model_version: -1
      input_map { key: "INPUT0" value: "SUM" }
      input_map { key: "INPUT1" value: "SUM" }
      output_map { key: "OUTPUT0" value: "OUTPUT0" }
    }
  ]
}
"""


class Composition(Scenario):
    name = "composition"
    description = """Triton Python-backend models calling models, inferd only, one
tritonclient.http client per connection: add_sub called directly ("direct"), a BLS
model calling add_sub with exec() ("bls"), an ensemble of two add_sub steps
("ensemble"), and the client calling add_sub twice itself, the ensemble's work
("client-two"). bls/direct is the cost of one BLS call; ensemble/client-two says
whether an ensemble beats the client's own two calls. Latency is the pipeline's,
CPU per request the whole server's (every process) per pipeline."""
    defaults = {"duration": 5.0, "warmup": 1.0, "rounds": 3, "connections": [1]}
    compares_mlserver = False
    load_tool = "tritonclient"
    model = "add_sub"

    def contenders(self) -> list[Contender]:
        return [Contender(way, INFERD) for way in WAYS]

    def cases(self) -> list[Case]:
        contenders = tuple(with_baseline(self.contenders(), self.options.baseline_src))
        return [
            Case(f"c{n}", contenders, CompositionLoad(n), self.model)
            for n in self.options.connections
        ]

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        for model in ("add_sub", "bls"):
            shutil.copytree(MODELS / model, repo / model)
        (repo / "add_sub_twice" / "1").mkdir(parents=True)
        (repo / "add_sub_twice" / "config.pbtxt").write_text(ADD_SUB_TWICE)

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        way = contender.label.removesuffix(BASELINE_SUFFIX)
        target = CompositionTarget(
            server.url,
            b"",
            way=way,
            http_address=f"127.0.0.1:{server.http_port}",
            server_pid=server.process.pid,
        )
        try:
            check_once(target)
        except Exception as error:
            raise VerificationError(f"{contender.label}: {error}") from None
        return target

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        wanted = [(BLS, DIRECT), (ENSEMBLE, CLIENT_TWO), (ENSEMBLE, DIRECT)]
        pairs = [(a, b) for a, b in wanted if {a, b} <= set(labels)]
        return pairs + baseline_pairs(labels)

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        lines = []
        for case, rows in summary.items():
            figures = {label: rows[label] for label in (DIRECT, BLS) if label in rows}
            if len(figures) == 2 and all(r.get("p50_ms") for r in figures.values()):
                extra = figures[BLS]["p50_ms"] - figures[DIRECT]["p50_ms"]
                lines.append(f"{case}: one BLS call adds {extra:.3f} ms at the median")
        return lines
