"""Overload after a worker restart: does the queue bound hold as it did before?

A server with 2 workers holds `iris` (scikit-learn) and `slow` (a runtime that sleeps
--service-ms per call, ``inference_timeout`` 1 s: the two workers serve about
2000/service-ms requests/s). `slow` is overloaded open-loop (--rate requests/s for
--seconds) while no worker has died: the fresh server's numbers. Then --clients
clients load `iris` while one worker is SIGKILLed (no iris request may be lost);
once the new worker holds both models again, `slow` is overloaded --runs more
times. Each run prints what was admitted (200) and their p99, what was refused
(503) and what got no answer at all (a connection lost or timed out). A bound that
holds admits about as many requests after the restart as before, at the same p99.

    python -m benchmarks restart-overload [--rate 200] [--seconds 4] [--queue-size 32]

tests/e2e/test_overload_restart.py runs the same phases and checks them.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common.models import add_sklearn_model, write_model_folder
from benchmarks.common.polling import wait_for
from benchmarks.common.procstat import workers as workers_of
from benchmarks.common.serverproc import ServerProcess, start_server
from benchmarks.options import add_json_out, command_parser
from benchmarks.results import write_command_record

from .openload import Drive, run_drive

SLOW_RUNTIME = '''
import time

from inferd import InferenceRequest, InferenceResponse, Model, Tensor


class Sleeps(Model):
    """Sleeps parameters.extra.seconds (holding its slot), then answers y = 2x."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        time.sleep(float(self.settings.extra["seconds"]))
        return InferenceResponse(outputs=[Tensor("y", request.inputs[0].data * 2)])
'''
IRIS_ROW = {"name": "input-0", "datatype": "FP64", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}
POLL_S = 0.05
T = TypeVar("T")


def write_repository(folder: Path, service_s: float, inference_timeout: float = 1.0) -> Path:
    """A model repository with `iris` and `slow` in ``folder``."""
    add_sklearn_model(folder, "iris")
    settings = {
        "inference_timeout": inference_timeout,
        "parameters": {"extra": {"seconds": service_s}},
    }
    write_model_folder(
        folder, "slow", "sleeps.Sleeps", files={"sleeps.py": SLOW_RUNTIME}, **settings
    )
    return folder


def poll(condition: Callable[[], T], what: str, timeout: float = 60.0) -> T:
    """``condition()`` once it is truthy; TimeoutError naming ``what`` after ``timeout``."""
    return wait_for(condition, what, timeout, POLL_S)


def worker_pids(server: ServerProcess) -> set[int]:
    """The server's live worker processes, from /proc (Linux): its children, or with
    protocol processes the model host's."""
    return workers_of(server.process.pid)


def slow_body(index: int) -> bytes:
    tensor = {"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [float(index)]}
    return json.dumps({"inputs": [tensor]}).encode()


def overload(server: ServerProcess, rate: float, seconds: float) -> Drive:
    """`slow` sent ``rate`` requests/s for ``seconds``, open-loop."""
    return run_drive(f"{server.url}/v2/models/slow/infer", slow_body, rate, seconds, 4000, 120)


@dataclass(frozen=True)
class Outcome:
    admitted: int  # 200
    refused: int  # 503
    lost: int  # no answer: a connection lost or timed out
    other: int  # any other status
    p99_s: float  # of the admitted

    @classmethod
    def of(cls, run: Drive) -> Outcome:
        statuses = [answer.status for answer in run.answers]
        latencies = [answer.latency_s for answer in run.answers if answer.status == 200]
        return cls(
            admitted=statuses.count(200),
            refused=statuses.count(503),
            lost=statuses.count(0) + run.unsent,
            other=sum(status not in (0, 200, 503) for status in statuses),
            p99_s=float(np.percentile(latencies, 99)) if latencies else 0.0,
        )

    def __str__(self) -> str:
        return (
            f"{self.admitted} admitted (p99 {self.p99_s:.2f}s), {self.refused} refused, "
            f"{self.lost} without an answer, {self.other} other"
        )


class IrisClient(threading.Thread):
    """Sends iris requests one after another until told to stop; keeps each status."""

    def __init__(self, server: ServerProcess, stop: threading.Event) -> None:
        super().__init__(name="iris-client")
        self.server, self.stop = server, stop
        self.statuses: list[int | str] = []

    def run(self) -> None:
        body = {"inputs": [IRIS_ROW]}
        with httpx.Client(base_url=self.server.url, timeout=60) as client:
            while not self.stop.is_set():
                try:
                    answer = client.post("/v2/models/iris/infer", json=body)
                    self.statuses.append(answer.status_code)
                except httpx.HTTPError as error:
                    self.statuses.append(repr(error))


def kill_a_worker_under_load(server: ServerProcess, clients: int) -> tuple[set[int], Counter[Any]]:
    """SIGKILL one worker while ``clients`` clients load iris; the workers before the
    kill, and how often each iris status was seen (a request lost with the worker: not
    200; the one running alone on it is its death's suspect: 503, not retried)."""
    poll(lambda: len(worker_pids(server)) == 2, "2 workers")
    workers = worker_pids(server)
    stop = threading.Event()
    loading = [IrisClient(server, stop) for _ in range(clients)]
    for client in loading:
        client.start()

    def answered() -> int:
        return sum(len(client.statuses) for client in loading)

    try:
        poll(lambda: answered() >= 4 * clients, "iris requests flowing")
        os.kill(min(workers), signal.SIGKILL)
        killed_at = answered()
        poll(lambda: answered() >= killed_at + 4 * clients, "iris served after the kill")
    finally:
        stop.set()
        for client in loading:
            client.join(60)
    return workers, Counter(status for client in loading for status in client.statuses)


def instances(server: ServerProcess, name: str) -> int:
    """How many workers hold the model now (Triton's instance_group count)."""
    config = httpx.get(f"{server.url}/v2/models/{name}/config", timeout=10).json()
    return int(config["instance_group"][0]["count"])


def wait_for_the_restart(server: ServerProcess, workers: set[int], timeout: float) -> None:
    """Poll until a new worker replaced the killed one and both hold both models."""
    poll(lambda: len(worker_pids(server) - workers) == 1, "a new worker", timeout)

    def reloaded() -> bool:
        return instances(server, "iris") == 2 and instances(server, "slow") == 2

    poll(reloaded, "both models held by both workers again", timeout)


def busy_seconds(server: ServerProcess) -> dict[str, float]:
    """Each worker's seconds with a request in flight so far (worker_busy_seconds_total)."""
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    return {
        sample.labels["worker"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "worker_busy_seconds_total"
    }


def measured_overload(
    server: ServerProcess, label: str, rate: float, seconds: float
) -> dict[str, Any]:
    """One overload, printed: its outcome, and how busy each worker was meanwhile (the
    two should be about equally busy: each serves half); its --json-out row."""
    before = busy_seconds(server)
    outcome = Outcome.of(overload(server, rate, seconds))
    after = busy_seconds(server)
    busy = {w: after[w] - before.get(w, 0.0) for w in sorted(after)}
    shares = ", ".join(f"{worker}: {spent:.1f}s" for worker, spent in busy.items())
    print(f"{label}: {outcome}; workers busy {shares}", flush=True)
    rate = outcome.admitted / seconds  # admitted/s, against p99: plot draws each run
    row = {"label": label, "requests_per_s": rate, "p99_ms": outcome.p99_s * 1e3}
    return row | asdict(outcome) | {"busy_s": busy}


def main(argv: Sequence[str]) -> int:
    parser = command_parser("restart-overload", __doc__)
    parser.add_argument("--service-ms", type=float, default=50.0, help="slow's time per call")
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s sent to slow")
    parser.add_argument("--seconds", type=float, default=4.0, help="how long each overload")
    parser.add_argument("--queue-size", type=int, default=32, help="max_queue_size")
    parser.add_argument("--clients", type=int, default=16, help="iris clients during the kill")
    parser.add_argument("--runs", type=int, default=2, help="overloads after the restart")
    add_json_out(parser)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="restart-overload-"))
    repository = write_repository(folder / "models", args.service_ms / 1000)
    # The server's own 2 workers, as the e2e test's (fork_workers gives each model 2).
    settings = {"parallel_workers": 2, "max_queue_size": args.queue_size, "fork_workers": False}
    server = start_server(repository, settings=settings, log_dir=folder)
    try:
        runs = [measured_overload(server, "fresh", args.rate, args.seconds)]
        workers, statuses = kill_a_worker_under_load(server, args.clients)
        print(f"iris while a worker was killed: statuses {sorted(map(str, statuses))}")
        wait_for_the_restart(server, workers, timeout=120)
        for run in range(args.runs):
            label = f"after the restart, run {run + 1}"
            runs.append(measured_overload(server, label, args.rate, args.seconds))
    finally:
        server.stop()
        print(f"server log: {server.log_path}")
    iris = {str(status): count for status, count in statuses.items()}
    write_command_record(args.json_out, "restart-overload", args, runs, iris_statuses=iris)
    return 0
