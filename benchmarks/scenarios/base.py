"""What a scenario declares: its repository, its contenders, its load, its check.

The harness (``benchmarks.harness``) does the rest the same way for every
scenario: free ports, settings.json, start, readiness, one verified answer,
warm-up, the measured run, stop; contenders alternating by round.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.common.serverproc import ServerProcess

from ..loadgen import Load, Target, Wrk
from ..options import Options
from ..servers import INFERD, MLSERVER, Contender, baseline_pairs, with_baseline

_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class VerificationError(RuntimeError):
    """A server answered the check request wrongly: its figures would mean nothing."""


@dataclass(frozen=True)
class Case:
    """One comparison: contenders taking turns under one load."""

    name: str
    contenders: tuple[Contender, ...]
    load: Load
    model: str  # the model requests go to, unless a contender names another


class Scenario:
    """A benchmark scenario; subclasses override what differs."""

    name: ClassVar[str]
    description: ClassVar[str]
    defaults: ClassVar[Mapping[str, Any]] = {}
    compares_mlserver: ClassVar[bool] = True
    # Common options the scenario varies itself, so the command line does not offer them.
    varies: ClassVar[frozenset[str]] = frozenset()
    load_tool: ClassVar[str] = "wrk"  # what load() runs, named for the command line
    model: ClassVar[str] = "iris"
    # settings.json fields every contender gets (under --extra-settings and its own).
    settings: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, options: Options) -> None:
        self.options = options

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The scenario's own flags."""

    def contenders(self) -> list[Contender]:
        """The servers compared (before --baseline-src adds inferd's twins)."""
        return [Contender(server, server) for server in self.options.servers]

    def load(self, connections: int) -> Load:
        return Wrk(connections, self.options.threads, self.options.wrk_timeout)

    def cases(self) -> list[Case]:
        """One comparison per connection count."""
        contenders = tuple(with_baseline(self.contenders(), self.options.baseline_src))
        return [
            Case(f"c{n}", contenders, self.load(n), self.model) for n in self.options.connections
        ]

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        """The model folders (settings.json is the harness's)."""
        raise NotImplementedError

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        """Check one answer; the target the load then drives."""
        raise NotImplementedError

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        """(a, b) pairs reported as a/b ratios, among the labels that ran."""
        pairs = [(INFERD, MLSERVER)] if {INFERD, MLSERVER} <= set(labels) else []
        return pairs + baseline_pairs(labels)

    def measure_in_process(self) -> dict[str, Any]:
        """Figures taken in this process, without servers (before the rounds)."""
        return {}

    def report_in_process(self, figures: Mapping[str, Any]) -> list[str]:
        return []

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        """Lines after the tables: what the figures mean for this scenario."""
        return []

    def describe(self) -> str:
        o = self.options
        workers = (
            "" if "parallel_workers" in self.varies else f", parallel_workers={o.parallel_workers}"
        )
        return (
            f"{self.name}: {o.rounds} round(s) of {o.duration:g}s (+{o.warmup:g}s warm-up), "
            f"connections {list(o.connections)}{workers}, extra settings {dict(o.extra_settings)}"
        )

    def model_of(self, contender: Contender, case: Case) -> str:
        return contender.model or case.model


def post_json(url: str, body: Mapping[str, Any], timeout: float = 30.0) -> tuple[int, Any]:
    """POST a JSON body; (status, the decoded answer or its text)."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _LOCAL.open(request, timeout=timeout) as response:
            status, raw = int(response.status), response.read()
    except urllib.error.HTTPError as error:
        status, raw = int(error.code), error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def first_output(url: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The first output of a 200 answer to ``body``; VerificationError otherwise."""
    status, answer = post_json(url, body)
    outputs = answer.get("outputs") if isinstance(answer, dict) else None
    if status != 200 or not outputs or "data" not in outputs[0]:
        raise VerificationError(f"verification POST {url} -> HTTP {status}: {answer}")
    output: dict[str, Any] = outputs[0]
    return output
