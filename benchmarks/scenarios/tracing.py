"""What tracing costs: inferd with OpenTelemetry tracing on (every request sampled) and off."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from benchmarks.common.models import train_iris
from benchmarks.common.serverproc import server_environment

from ..otlp_receiver import OtlpReceiver
from ..repository import write_sklearn_model
from ..results import alternate
from ..servers import BASELINE_SUFFIX, BENCHMARKS_DIR, INFERD, Contender, baseline_pairs
from .base import VerificationError
from .rest import Rest, add_asgi_arguments

ON, OFF = "tracing-on", "tracing-off"
# Every span exported, none dropped: the SDK's default queue (2048 spans, sent every
# 5 s) overflows at these rates, which would understate what exporting costs.
EXPORT_ENV = {
    "OTEL_TRACES_SAMPLER": "always_on",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
    "OTEL_BSP_MAX_QUEUE_SIZE": "262144",
}


class Tracing(Rest):
    name = "tracing"
    description = """What tracing costs: the rest scenario, inferd only, tracing on vs off.

Each round runs inferd twice on the same model and load: with tracing_server set
(every request sampled: OTEL_TRACES_SAMPLER=always_on; a request span and its
queue wait, batch and predict spans, exported over OTLP/gRPC to a receiver this
process runs, which counts them) and without (OpenTelemetry is not imported).
With --baseline-src, each also runs on the baseline tree: tracing-off against
tracing-off@baseline is what the tracing code costs a server that does not trace.
Then, with no network in between, it calls the REST app itself in a loop, a
process per sample: tracing on and off in turn (and off on the baseline tree),
each sample's CPU per request (all its threads: the exporter's included)."""
    compares_mlserver = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_asgi_arguments(parser, requests=10_000)

    @cached_property
    def receiver(self) -> OtlpReceiver:
        """The collector the traced servers export to, for the whole run."""
        os.environ.update(EXPORT_ENV)  # the servers inherit it
        return OtlpReceiver(keep=False).start()

    def contenders(self) -> list[Contender]:
        traced = {"tracing_server": self.receiver.endpoint}
        return [Contender(ON, INFERD, traced), Contender(OFF, INFERD, {})]

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        tree_pairs = [(ON + tree, OFF + tree) for tree in ("", BASELINE_SUFFIX)]
        return [p for p in tree_pairs if set(p) <= set(labels)] + baseline_pairs(labels)

    def measure_in_process(self) -> dict[str, Any]:
        args = self.options.args
        if not args.asgi_requests:
            return {}
        return {"asgi_us_per_request": asgi_comparison(self, args.asgi_rounds, args.asgi_requests)}

    def report_in_process(self, figures: Mapping[str, Any]) -> list[str]:
        if "asgi_us_per_request" not in figures:
            return []
        medians = {
            name: {key: statistics.median(s[key] for s in samples) for key in ("cpu_us", "wall_us")}
            for name, samples in figures["asgi_us_per_request"].items()
        }
        lines = ["REST app called directly (own process per sample), median per request:"]
        lines += [
            f"  {name:<22} CPU {m['cpu_us']:8.1f} us  wall {m['wall_us']:8.1f} us"
            for name, m in medians.items()
        ]
        for a, b in ((ON, OFF), (OFF, OFF + BASELINE_SUFFIX)):
            if a in medians and b in medians:
                ratio = medians[a]["cpu_us"] / medians[b]["cpu_us"]
                lines.append(f"  {a}/{b}: CPU per request x{ratio:.3f}")
        return lines

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        return [f"spans the receiver got over the whole run: {self.receiver.count}"]


def asgi_sample(
    python: str, source: Path, repository: Path, requests: int, endpoint: str | None
) -> Any:
    """One run of benchmarks/tracing_asgi.py on the inferd tree ``source``."""
    command = [python, str(BENCHMARKS_DIR / "tracing_asgi.py"), str(repository)]
    command += [str(requests), *([endpoint] if endpoint else [])]
    env = server_environment() | {"PYTHONPATH": str(source)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise VerificationError(f"tracing_asgi.py failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def asgi_comparison(scenario: Tracing, rounds: int, requests: int) -> dict[str, list[Any]]:
    """Per-request cost through the REST app, tracing on and off (and off on the
    baseline tree, if given), alternating, ``rounds`` samples each."""
    programs = scenario.options.programs
    python = programs.inferd_python
    variants = {
        ON: (programs.inferd_src, scenario.receiver.endpoint),
        OFF: (programs.inferd_src, None),
    }
    if scenario.options.baseline_src is not None:
        variants[OFF + BASELINE_SUFFIX] = (scenario.options.baseline_src, None)
    samples: dict[str, list[Any]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="inferd-bench-tracing-asgi-") as tmp:
        write_sklearn_model(Path(tmp), "iris", train_iris())
        for round_index in range(rounds):
            for name in alternate(list(variants), round_index):
                source, endpoint = variants[name]
                samples[name].append(asgi_sample(python, source, Path(tmp), requests, endpoint))
    return samples
