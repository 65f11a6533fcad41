"""What a user configured holds with one protocol process and with three
(host/placement.py: where a model runs, from its settings and the server's).

- ``cache_enabled``: one response cache for the server, so a repeat is answered
  from it whichever process takes its connection;
- ``max_queue_size``: at most that many requests of a model wait in the whole
  server (a copied model's processes each let their share wait);
- ``parallel_workers`` set: models run in worker processes, so a model that kills
  its process in ``predict`` costs a worker, not the connections of other clients.
"""

from __future__ import annotations

import asyncio
import textwrap
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.models import add_custom_model, write_model_folder
from tests.support.polling import wait_for
from tests.support.procstat import descendants, served_by
from tests.support.serverproc import ServerProcess, start_server

from .metrics_helpers import model, scrape, value
from .test_response_cache import FEATURES, add_token_model, cache_counts, json_infer, token

PROCESSES = [1, 3]
X = {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}

# Models of this module: one that waits (without holding its event loop) until a
# file exists, one that ends its process in predict as a segfault would.
RUNTIME = textwrap.dedent(
    """
    import asyncio
    import os

    from inferd import InferenceRequest, InferenceResponse, Model


    class WaitsForGate(Model):
        async def predict(self, request: InferenceRequest) -> InferenceResponse:
            gate = self.settings.extra["gate"]
            while not os.path.exists(gate):
                await asyncio.sleep(0.01)
            return InferenceResponse(outputs=[])


    class ExitsInPredict(Model):
        def predict(self, request: InferenceRequest) -> InferenceResponse:
            os._exit(3)
    """
)


def add_runtime_model(repository: Path, name: str, runtime: str, **settings: object) -> None:
    files = {"placed.py": RUNTIME}
    write_model_folder(repository, name, f"placed.{runtime}", files=files, **settings)


def start(repository: Path, processes: int, **settings: object) -> ServerProcess:
    server = start_server(repository, {"protocol_processes": processes, **settings})
    if processes > 1:  # the ports open before every process is ready: wait for all
        expected = f"serving with {processes} protocol processes"
        wait_for(lambda: expected in server.log(), server.log, 60)
    return server


@pytest.mark.parametrize("processes", PROCESSES)
def test_a_repeat_is_answered_from_the_one_cache_whichever_process_takes_it(
    tmp_path: Path, processes: int
) -> None:
    add_token_model(tmp_path, "cached", cache_enabled=True)
    settings = {"cache_enabled": True, "cache_size": 10}
    with start(tmp_path, processes, **settings) as server:
        # Each request on a new connection: the kernel spreads them over the processes.
        tokens = {token(json_infer(server, "cached", FEATURES)) for _ in range(10)}
        assert len(tokens) == 1, "one cache: the model ran once"
        assert cache_counts(server, "cached") == (9, 1)
        samples = scrape(server.metrics_port)
        assert value(samples, "model_cache_misses_total", **model("cached")) == 1
        assert value(samples, "model_cache_hits_total", **model("cached")) == 9
        if processes > 1:
            assert "Model 'cached' runs in the model host" in server.log()


async def _burst(url: str, count: int, admitted_at_most: int, gate: Path) -> Counter[int]:
    """``count`` concurrent requests, each on its own connection; once at least
    ``count - admitted_at_most`` are refused, the model's gate opens and the others
    are answered. Nothing the model runs ends before that, so every request
    answered 200 was waiting or running at once."""
    statuses: Counter[int] = Counter()
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one() -> None:
            response = await client.post(url, json={"inputs": [X]})
            statuses[response.status_code] += 1

        tasks = [asyncio.ensure_future(one()) for _ in range(count)]
        deadline = asyncio.get_running_loop().time() + 30
        while statuses[503] < count - admitted_at_most:
            assert asyncio.get_running_loop().time() < deadline, (
                f"more than {admitted_at_most} requests admitted: {statuses}"
            )
            await asyncio.sleep(0.05)
        gate.touch()
        await asyncio.gather(*tasks)
    return statuses


@pytest.mark.parametrize("processes", PROCESSES)
@pytest.mark.parametrize("bound_in", ["settings.json", "model-settings.json"])
def test_the_queue_bound_holds_for_the_whole_server(
    tmp_path: Path, processes: int, bound_in: str
) -> None:
    gate = tmp_path / "gate"
    own = {"max_queue_size": 64} if bound_in == "model-settings.json" else {}
    server_bound = {"max_queue_size": 64} if bound_in == "settings.json" else {}
    add_runtime_model(
        tmp_path, "gated", "WaitsForGate", parameters={"extra": {"gate": str(gate)}}, **own
    )
    with start(tmp_path, processes, **server_bound) as server:
        # Running: one request per process that runs the model (threads_per_worker 1):
        # each protocol process for a copy, the host alone for a model bounded there.
        running = processes if not own else 1
        statuses = asyncio.run(
            _burst(f"{server.url}/v2/models/gated/infer", 600, 64 + running, gate)
        )
        assert set(statuses) <= {200, 503}, statuses
        assert sum(statuses.values()) == 600
        assert 0 < statuses[200] <= 64 + running, statuses
        if own and processes > 1:
            assert "it sets max_queue_size: 64" in server.log()
        elif processes > 1:
            assert "at most 21 in each of the 3 protocol processes" in server.log()


class Clients:
    """Threads each sending requests to ``slow`` on its own kept-alive connection
    until stopped, counting statuses and errors (a lost connection)."""

    def __init__(self, server: ServerProcess, threads: int = 3) -> None:
        self._url = f"{server.url}/v2/models/slow/infer"
        self._stop = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        body = {"inputs": [X], "parameters": {"sleep": 0.02}}
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                try:
                    outcome = str(client.post(self._url, json=body).status_code)
                except httpx.HTTPError as error:
                    outcome = type(error).__name__
                with self._lock:
                    self.outcomes[outcome] += 1

    def __enter__(self) -> Clients:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def pid_of_slow(server: ServerProcess) -> int:
    body = {"inputs": [X]}
    response = httpx.post(f"{server.url}/v2/models/slow/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    outputs = {output["name"]: output for output in response.json()["outputs"]}
    return int(outputs["pid"]["data"][0])


@pytest.mark.parametrize("processes", PROCESSES)
def test_parallel_workers_set_runs_models_in_workers_whose_crash_loses_no_connection(
    tmp_path: Path, processes: int
) -> None:
    add_custom_model(tmp_path, "slow", "SlowEcho")
    add_runtime_model(tmp_path, "crash", "ExitsInPredict")
    with start(tmp_path, processes, parallel_workers=2) as server:
        # Worker processes: none of the processes that hold the connections (the
        # lone server; the supervisor's children: protocol processes and the host).
        holders = {server.process.pid}
        if processes > 1:
            holders |= served_by(server.process.pid)
        pids = {pid_of_slow(server) for _ in range(6)}
        assert not pids & holders and pids <= descendants(server.process.pid)
        with Clients(server) as clients:
            wait_for(lambda: clients.outcomes["200"] >= 10, server.log, 30)
            crash = httpx.post(f"{server.url}/v2/models/crash/infer", json={"inputs": [X]})
            assert crash.status_code == 503, crash.text
            # The others keep being answered on the same server.
            answered = clients.outcomes["200"]
            wait_for(lambda: clients.outcomes["200"] >= answered + 10, server.log, 30)
        assert set(clients.outcomes) <= {"200", "503"}, clients.outcomes
        assert "exited" in server.log() or "died" in server.log()
        pid_of_slow(server)  # served again
