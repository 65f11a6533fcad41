"""REST scenarios on the iris model: plain, and with adaptive batching."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from benchmarks.common.models import train_iris
from benchmarks.common.serverproc import ServerProcess

from ..loadgen import Target
from ..repository import ROW, predicted_class, v2_request, write_sklearn_model
from ..servers import INFERD, MLSERVER, Contender
from .base import Case, Scenario, VerificationError, first_output

REQUEST = v2_request([ROW])


class Rest(Scenario):
    name = "rest"
    description = """REST: one FP32 iris row per POST /v2/models/iris/infer, inferd vs MLServer.

Both servers get the same repository (settings.json and an
mlserver_sklearn.SKLearnModel LogisticRegression on iris) and the same wrk load;
each answer is checked (status 200, the right class) before the load starts."""
    # Model-settings fields added to the iris model (batching sets some).
    model_fields: ClassVar[Mapping[str, Any]] = {}

    @cached_property
    def estimator(self) -> Any:
        """One trained model for every run: identical files for every contender."""
        return train_iris()

    @cached_property
    def expected_class(self) -> int:
        return predicted_class(self.estimator)

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        write_sklearn_model(repo, self.model, self.estimator, fields=self.model_fields)

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        url = f"{server.url}/v2/models/{self.model_of(contender, case)}/infer"
        output = first_output(url, REQUEST)
        data = np.asarray(output["data"]).ravel()
        if data.size != 1 or int(data[0]) != self.expected_class:
            raise VerificationError(f"POST {url}: expected [{self.expected_class}], got {output}")
        return Target(url, json.dumps(REQUEST).encode())


class Batching(Rest):
    name = "batching"
    description = """Adaptive batching over REST: inferd vs MLServer, both batching.

The iris model with max_batch_size 32 and max_batch_time 0.002 s, both servers
with parallel_workers 1 (one worker process runs the model), at 1, 16 and 64
connections. The one-connection run is the lone-request latency: inferd's p50
must not include max_batch_time (MLServer waits it out)."""
    defaults = {"connections": [1, 16, 64], "parallel_workers": 1}
    model_fields = {"max_batch_size": 32, "max_batch_time": 0.002}

    def describe(self) -> str:
        return f"{super().describe()}, batching {dict(self.model_fields)}"

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        lines = []
        for case, rows in summary.items():
            if INFERD in rows and MLSERVER in rows:
                ours, theirs = rows[INFERD]["p99_ms"], rows[MLSERVER]["p50_ms"]
                lines.append(f"{case}: inferd p99 {ours:.2f} ms vs mlserver p50 {theirs:.2f} ms")
        return lines


def add_asgi_arguments(parser: argparse.ArgumentParser, requests: int) -> None:
    """The flags of a scenario that also calls the REST app in-process (metrics, tracing)."""
    parser.add_argument(
        "--asgi-requests",
        type=int,
        default=requests,
        help="requests per in-process REST app sample (0: skip)",
    )
    parser.add_argument("--asgi-rounds", type=int, default=6, help="samples per variant")
