"""Overload: 10x what a model serves, open-loop; what each queue bound makes of it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.serverproc import ServerProcess

from ..loadgen import Load, Target
from ..openload import OpenLoad
from ..repository import ROW, v2_request, write_sleep_model
from ..servers import INFERD, MLSERVER, Contender
from .base import Case, Scenario, VerificationError, first_output

REQUEST = v2_request([ROW], name="x")
DOUBLED = np.asarray(ROW, dtype=np.float32) * 2


def doubled(body: bytes) -> bool:
    """Whether an answer carries y = 2x for the request's row (FP32: MLServer writes
    each float32 as the nearest double, inferd as the shortest float32 text)."""
    outputs = json.loads(body).get("outputs") or [{}]
    data = np.asarray(outputs[0].get("data", []), dtype=np.float32)
    return data.shape == (len(ROW),) and bool(np.all(data == DOUBLED))


class Overload(Scenario):
    name = "overload"
    description = """Overload: a model of known service time sent 10x what it serves.

A model that sleeps --service-ms per call (holding its worker; 1 worker by
default, so it serves about 1000/service-ms requests/s) is sent --times that
rate, open-loop (requests keep coming whatever the answers; --connections caps
the requests in flight, past which they are counted as unsent). inferd runs
once per --queue-sizes value (its max_queue_size in settings.json; 0: no bound);
MLServer has no bound. Reported: admitted answers/s and their p50/p99 (each
checked: y = 2x), refusals (503, each must carry Retry-After) and how fast they
came, and the server's resident memory (all its processes) before and after."""
    defaults = {"duration": 3.0, "warmup": 0.0, "rounds": 1, "connections": [2000],
                "parallel_workers": 1}  # fmt: skip
    load_tool = "open-loop"
    model = "sleep"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--service-ms", type=float, default=10.0, help="the model's time")
        parser.add_argument("--times", type=float, default=10.0, help="load / what it serves")
        parser.add_argument(
            "--queue-sizes",
            type=int,
            nargs="+",
            default=None,
            help="inferd's max_queue_size values compared (default: inferd's default and 0)",
        )

    def queue_sizes(self) -> list[int]:
        from inferd.settings.server import DEFAULT_MAX_QUEUE_SIZE

        chosen: list[int] | None = self.options.args.queue_sizes
        return chosen if chosen is not None else [DEFAULT_MAX_QUEUE_SIZE, 0]

    def contenders(self) -> list[Contender]:
        inferds = [
            Contender(f"inferd q={size}", INFERD, {"max_queue_size": size})
            for size in self.queue_sizes()
        ]
        theirs = [Contender(MLSERVER, MLSERVER)] if MLSERVER in self.options.servers else []
        return (inferds if INFERD in self.options.servers else []) + theirs

    def served_per_s(self) -> float:
        return 1000.0 / self.options.args.service_ms * max(1, self.options.parallel_workers)

    def load(self, connections: int) -> Load:
        rate = self.options.args.times * self.served_per_s()
        return OpenLoad(rate, doubled, max_outstanding=connections)

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        implementation = "sleep.SleepInferd" if contender.kind == INFERD else "sleep.SleepMLServer"
        write_sleep_model(repo, implementation, self.options.args.service_ms)

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        url = f"{server.url}/v2/models/{self.model}/infer"
        output = first_output(url, REQUEST)
        if not doubled(json.dumps({"outputs": [output]}).encode()):
            raise VerificationError(f"POST {url}: expected {DOUBLED.tolist()}, got {output}")
        return Target(url, json.dumps(REQUEST).encode(), server_pid=server.process.pid)

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        return []  # the runs' own lines and the notes say it

    def describe(self) -> str:
        args = self.options.args
        return (
            f"{super().describe()}, model {args.service_ms:g} ms per call, "
            f"{args.times:g}x {self.served_per_s():.0f} req/s offered"
        )

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        return [
            "admitted req/s and p50/p99 are the 200 answers'; refusals, unsent requests and "
            "server memory are on each run's second line (and in --json-out)"
        ]
