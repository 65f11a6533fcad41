"""``protocol_processes: 2``: a supervisor and two protocol processes sharing the ports.

Which process answered is read from the answer itself: the ``slow`` model
(testmodels.SlowEcho) runs in the protocol process that took the connection
(``parallel_workers: 0`` there) and returns its pid. Each request goes on a fresh
connection, so the kernel picks a process for each (SO_REUSEPORT).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.procstat import children, is_running, served_by, unix_socket_paths
from tests.support.serverproc import LEFT_OUT, ServerProcess

TWO = {"protocol_processes": 2, "shutdown_grace_seconds": 6}
# A request that takes longer than this hangs: the tests fail it.
REQUEST_TIMEOUT = 15.0
CLIENT_THREADS = 4


def slow_body(sleep: float = 0.0, **parameters: Any) -> dict[str, Any]:
    x = {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}
    return {"inputs": [x], "parameters": {"sleep": sleep, **parameters}}


def answered_by(response: httpx.Response) -> int:
    """The pid of the protocol process whose model answered."""
    assert response.status_code == 200, response.text
    outputs = {output["name"]: output for output in response.json()["outputs"]}
    return int(outputs["pid"]["data"][0])


def rest_pid(server: ServerProcess) -> int:
    """Which process answers a request on a new connection."""
    url = f"{server.url}/v2/models/slow/infer"
    return answered_by(httpx.post(url, json=slow_body(), timeout=REQUEST_TIMEOUT))


def grpc_pid(server: ServerProcess) -> int:
    """The same over gRPC, on a new channel (so a new connection)."""
    x = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[1])
    x.contents.fp32_contents.append(1.0)
    with grpc.insecure_channel(server.grpc_address) as channel:
        reply = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            pb.ModelInferRequest(model_name="slow", inputs=[x]), timeout=REQUEST_TIMEOUT
        )
    index = next(i for i, output in enumerate(reply.outputs) if output.name == "pid")
    return int(np.frombuffer(reply.raw_output_contents[index], np.int64)[0])


def pids_seen(ask: Callable[[], int], count: int, timeout: float = 30.0) -> set[int]:
    """Ask on fresh connections until ``count`` different processes have answered."""
    seen: set[int] = set()

    def enough() -> bool:
        seen.add(ask())
        return len(seen) >= count

    wait_for(enough, lambda: f"{count} processes to answer (saw {seen})", timeout, 0.0)
    return seen


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    add_custom_model(tmp_path, "slow", "SlowEcho")
    return tmp_path


@pytest.fixture
def two(start: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    server = start(repository, settings=TWO)
    wait_for(lambda: "serving with 2 protocol processes" in server.log(), server.log, 30)
    return server


def test_both_processes_take_connections_over_rest_and_grpc(two: ServerProcess) -> None:
    processes = served_by(two.process.pid)
    assert len(processes) == 2
    assert pids_seen(lambda: rest_pid(two), 2) == processes
    assert pids_seen(lambda: grpc_pid(two), 2) == processes
    # Process 0 tells the server's events, its lines named; the other's are detail (DEBUG).
    ready = [line for line in two.log().splitlines() if "inferd is ready" in line]
    assert [line.split(" INFO ")[1] for line in ready] == [
        "[protocol process 0] [inferd.server.parts] inferd is ready"
    ]


def rest_pid_of(server: ServerProcess, model: str, **parameters: Any) -> int:
    url = f"{server.url}/v2/models/{model}/infer"
    body = slow_body(**parameters)
    return answered_by(httpx.post(url, json=body, timeout=REQUEST_TIMEOUT))


@pytest.fixture
def hosting(start: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    """Two protocol processes and the model host, running ``pinned`` (its workers
    are sized by hand) in a worker of its own. ``parallel_workers`` is left to its
    default (set, it would send ``slow`` to the host too)."""
    add_custom_model(repository, "pinned", "SlowEcho", workers=1)
    server = start(repository, settings={**TWO, "parallel_workers": LEFT_OUT})
    expected = "serving with 2 protocol processes and the model host"
    wait_for(lambda: expected in server.log(), server.log, 30)
    return server


def test_a_model_that_cannot_be_copied_runs_once_in_the_model_host(
    hosting: ServerProcess,
) -> None:
    log = hosting.log()
    assert "Model 'pinned' runs in the model host" in log and "it sets workers: 1" in log
    assert "[protocol process 0] [inferd.serving.registry] Loaded model 'pinned'" in log
    # The copied model answers from both protocol processes; the pinned one, reached
    # through each of them, from one process only: the host's worker.
    protocol = pids_seen(lambda: rest_pid(hosting), 2)
    assert pids_seen(lambda: grpc_pid(hosting), 2) == protocol
    pinned = {rest_pid_of(hosting, "pinned") for _ in range(12)}
    assert len(pinned) == 1 and not pinned & protocol
    assert len(served_by(hosting.process.pid)) == 3  # two protocol processes, the host


def test_a_model_that_cannot_be_copied_loads_later_when_the_host_runs(
    hosting: ServerProcess, repository: Path
) -> None:
    add_custom_model(repository, "sequences", "SlowEcho", sequence_batching={})
    response = httpx.post(f"{hosting.url}/v2/repository/models/sequences/load", timeout=30)
    assert response.status_code == 200, response.text
    steps = [{"sequence_id": 7, "sequence_start": step == 0} for step in range(12)]
    answered = {rest_pid_of(hosting, "sequences", **step) for step in steps}
    assert len(answered) == 1  # the host's worker, through either process
    response = httpx.post(f"{hosting.url}/v2/repository/models/sequences/unload", timeout=30)
    assert response.status_code == 200, response.text
    url = f"{hosting.url}/v2/models/sequences/ready"  # on disk, not loaded: 503
    assert all(httpx.get(url, timeout=10).status_code == 503 for _ in range(6))
    response = httpx.post(f"{hosting.url}/v2/models/sequences/infer", json=slow_body())
    assert response.status_code == 404, response.text


def test_a_killed_model_host_is_restarted_and_its_models_serve_again(
    hosting: ServerProcess,
) -> None:
    before = rest_pid_of(hosting, "pinned")
    # The host: the supervisor's child whose worker process answered.
    host = next(pid for pid in served_by(hosting.process.pid) if before in children(pid))
    os.kill(host, signal.SIGKILL)

    def serves_again() -> bool:
        response = httpx.post(
            f"{hosting.url}/v2/models/pinned/infer", json=slow_body(), timeout=REQUEST_TIMEOUT
        )
        assert response.status_code in (200, 503), response.text
        return response.status_code == 200

    wait_for(serves_again, hosting.log, 60, 0.2)
    assert rest_pid_of(hosting, "pinned") != before
    assert "The model host (pid" in hosting.log() and "exited with signal SIGKILL" in hosting.log()


def test_a_later_load_of_a_model_that_cannot_be_copied_starts_the_model_host(
    two: ServerProcess, repository: Path
) -> None:
    """No model loaded at start needed the host: the first load that needs it starts
    it (REST), and a later one (gRPC) finds it running."""
    assert len(served_by(two.process.pid)) == 2
    add_custom_model(repository, "sequences", "SlowEcho", sequence_batching={})
    response = httpx.post(f"{two.url}/v2/repository/models/sequences/load", timeout=60)
    assert response.status_code == 200, response.text
    assert "Starting the model host" in two.log()
    steps = [{"sequence_id": 7, "sequence_start": step == 0} for step in range(8)]
    answered = {rest_pid_of(two, "sequences", **step) for step in steps}
    assert len(answered) == 1  # the host, through either process
    add_custom_model(repository, "batched", "SlowEcho", max_batch_size=4)
    with grpc.insecure_channel(two.grpc_address) as channel:
        pb_grpc.GRPCInferenceServiceStub(channel).RepositoryModelLoad(
            pb.RepositoryModelLoadRequest(model_name="batched"), timeout=60
        )
    assert {rest_pid_of(two, "batched") for _ in range(4)} == answered
    assert two.log().count("Starting the model host:") == 1
    assert len(served_by(two.process.pid)) == 3


class Load:
    """Client threads sending requests on fresh connections until stopped; each
    outcome is 200, 503 (refused: shutting down), a connection error (refused or
    reset: no process, or the one that had it died) or, what must never happen,
    a hang past REQUEST_TIMEOUT."""

    def __init__(self, server: ServerProcess, sleep: float) -> None:
        self._url = f"{server.url}/v2/models/slow/infer"
        self._body = slow_body(sleep)
        self._stop = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self.pids: set[int] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(CLIENT_THREADS)
        self._running = [self._pool.submit(self._send) for _ in range(CLIENT_THREADS)]

    def _send(self) -> None:
        while not self._stop.is_set():
            outcome, pid = self._one()
            with self._lock:
                self.outcomes[outcome] += 1
                if pid is not None:
                    self.pids.add(pid)

    def _one(self) -> tuple[str, int | None]:
        try:
            response = httpx.post(self._url, json=self._body, timeout=REQUEST_TIMEOUT)
        except httpx.TimeoutException:
            return "hung", None
        except httpx.TransportError:
            return "connection error", None
        if response.status_code == 200:
            return "200", answered_by(response)
        return str(response.status_code), None

    def answered(self, count: int) -> bool:
        with self._lock:
            return self.outcomes["200"] >= count

    def stop(self) -> Counter[str]:
        self._stop.set()
        for running in self._running:
            running.result(timeout=REQUEST_TIMEOUT * 2)
        self._pool.shutdown()
        return self.outcomes


@pytest.fixture
def load_on() -> Iterator[Callable[[ServerProcess, float], Load]]:
    started: list[Load] = []

    def start_load(server: ServerProcess, sleep: float) -> Load:
        started.append(Load(server, sleep))
        return started[-1]

    yield start_load
    for load in started:
        load.stop()


@pytest.mark.parametrize("to", ["supervisor", "process group"])
def test_sigterm_under_load_loses_nothing(
    two: ServerProcess,
    load_on: Callable[[ServerProcess, float], Load],
    tmp_path: Path,
    to: str,
) -> None:
    """SIGTERM to the supervisor (Kubernetes signals PID 1), or to every process of the
    group (systemd's default): either way each process drains once, nothing is cut."""
    processes = served_by(two.process.pid)
    load = load_on(two, 0.02)
    wait_for(lambda: load.answered(20), "the load to be answered", 30)
    # Requests running when the signal comes, on both processes, are answered.
    marks = tmp_path / "started"
    marks.mkdir()
    body = slow_body(1.0)
    with ThreadPoolExecutor(6) as pool:
        running = [
            pool.submit(
                httpx.post,
                f"{two.url}/v2/models/slow/infer",
                json={**body, "parameters": {**body["parameters"], "started": str(marks / str(i))}},
                timeout=REQUEST_TIMEOUT,
            )
            for i in range(6)
        ]
        wait_for(lambda: len(list(marks.iterdir())) == 6, "the slow requests to start", 30)
        signalled = time.monotonic()
        if to == "supervisor":
            two.process.send_signal(signal.SIGTERM)
        else:
            os.killpg(two.process.pid, signal.SIGTERM)
        pids = {answered_by(future.result()) for future in running}
    assert two.process.wait(timeout=TWO["shutdown_grace_seconds"] + 10) == 0
    assert time.monotonic() - signalled < TWO["shutdown_grace_seconds"]
    outcomes = load.stop()
    assert set(outcomes) <= {"200", "503", "connection error"}, outcomes
    assert pids <= processes
    assert two.log().count("stopped (exit code 0)") == 2
    assert "again" not in two.log()  # no process took a repeat as the signal that cuts


def test_sigterm_answers_what_the_model_host_runs_within_one_deadline(
    hosting: ServerProcess, repository: Path, tmp_path: Path
) -> None:
    """Requests forwarded to the host when SIGTERM comes are answered: the host,
    signalled with the protocol processes (one shutdown_grace_seconds for the server),
    drains what they forwarded while they drain, and is waited for last."""
    add_custom_model(repository, "threads", "SlowEcho", workers=1, threads_per_worker=3)
    response = httpx.post(f"{hosting.url}/v2/repository/models/threads/load", timeout=30)
    assert response.status_code == 200, response.text
    marks = tmp_path / "started"
    marks.mkdir()

    def slow(i: int) -> httpx.Response:
        body = slow_body(1.0, started=str(marks / str(i)))
        url = f"{hosting.url}/v2/models/threads/infer"
        return httpx.post(url, json=body, timeout=REQUEST_TIMEOUT)

    with ThreadPoolExecutor(3) as pool:
        running = [pool.submit(slow, i) for i in range(3)]
        wait_for(lambda: len(list(marks.iterdir())) == 3, "the requests to run in the host", 30)
        hosting.process.send_signal(signal.SIGTERM)
        assert [future.result().status_code for future in running] == [200, 200, 200]
    assert hosting.process.wait(timeout=TWO["shutdown_grace_seconds"] + 10) == 0
    log = hosting.log()
    assert "stopping 2 protocol processes and the model host" in log
    assert "The model host stopped (exit code 0)" in log
    assert "Protocol process 0 stopped" in log and "Protocol process 1 stopped" in log


def test_a_process_cut_at_its_deadline_makes_the_server_exit_1(
    two: ServerProcess, tmp_path: Path
) -> None:
    """As a lone server's exit status says that its deadline cut what still ran."""
    started = tmp_path / "started"
    # A plain predict's first call runs in its model's thread: the process answers the
    # client at the cut, and exits 1 at its deadline since that model code still runs.
    body = slow_body(30.0, started=str(started))
    with ThreadPoolExecutor(1) as pool:
        blocked = pool.submit(
            httpx.post, f"{two.url}/v2/models/slow/infer", json=body, timeout=REQUEST_TIMEOUT
        )
        wait_for(started.exists, "the request to block its process", 30)
        two.process.send_signal(signal.SIGTERM)
        assert two.process.wait(timeout=TWO["shutdown_grace_seconds"] + 10) == 1
        assert blocked.result().status_code == 503
    assert "Model code is still running" in two.log()
    assert re.search(r"Protocol process [01] did not drain \(exit code 1\)", two.log())


def test_a_killed_process_is_restarted_and_serves_again(
    two: ServerProcess, load_on: Callable[[ServerProcess, float], Load]
) -> None:
    first = served_by(two.process.pid)
    load = load_on(two, 0.01)
    wait_for(lambda: load.pids == first, "both processes to answer the load", 30)
    killed = min(first)
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: f"(pid {killed}) exited with signal SIGKILL" in two.log(), two.log, 30)
    restarted = wait_for(
        lambda: (served_by(two.process.pid) - first) or None, "a new protocol process", 30
    )
    wait_for(lambda: restarted <= load.pids, lambda: f"{restarted} to answer ({load.pids})", 30)
    assert len(served_by(two.process.pid)) == 2
    outcomes = load.stop()
    assert set(outcomes) <= {"200", "connection error"}, outcomes
    # Process 0 (forked first: the lowest pid) speaks for the server; restarted, it
    # tells nothing of its own start (the server served all along): the supervisor
    # says it is back.
    (new,) = restarted
    # Said once the supervisor's ready poll (backing off to 1 s) finds it ready, which
    # may come after its public port answered the load.
    wait_for(lambda: f"Protocol process 0 (pid {new}) is serving" in two.log(), two.log, 10)
    told = [line for line in two.log().splitlines() if " INFO " in line]
    assert sum("inferd is ready" in line for line in told) == 1, told
    assert sum("Loading model 'slow'" in line for line in told) == 1, told


def test_a_taken_port_is_a_clear_error_before_any_process_starts(
    start: Callable[..., ServerProcess], repository: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = start(repository, settings={**TWO, "http_port": port}, wait=None)
        assert server.process.wait(timeout=30) != 0
    assert f"Cannot listen for the REST server on 127.0.0.1:{port}" in server.log()
    assert "Protocol process" not in server.log()


def test_settings_a_protocol_process_cannot_start_with_stop_the_server(
    start: Callable[..., ServerProcess], repository: Path
) -> None:
    """As a lone server stops on them: restarting the processes would fail for good."""
    restriction = {"apis": ["inference"], "header": "k", "values_from_env": "TEST_NO_SUCH_KEYS"}
    settings = {**TWO, "restricted_apis": [restriction]}
    server = start(repository, settings=settings, wait=None)
    assert server.process.wait(timeout=30) not in (None, 0)
    assert "environment variable TEST_NO_SUCH_KEYS is not set" in server.log()
    assert re.search(r"Protocol process [01] could not start with these settings", server.log())
    assert "starting it again" not in server.log()


def test_the_processes_die_with_the_supervisor(two: ServerProcess) -> None:
    processes = served_by(two.process.pid)
    two.process.kill()
    two.process.wait(timeout=10)
    wait_for(lambda: not any(is_running(pid) for pid in processes), "the children to exit", 10)


def test_a_ctrl_c_to_the_process_group_drains_each_process_once(two: ServerProcess) -> None:
    os.killpg(two.process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    assert two.process.wait(timeout=TWO["shutdown_grace_seconds"] + 10) == 0
    log = two.log()
    # Process 0 tells the server's stop; each drained once: no "again", both exited 0.
    assert log.count("Received SIGTERM: shutting down") == 1
    assert "again" not in log and "stopped 0 request" not in log
    assert log.count("stopped (exit code 0)") == 2


def test_the_private_sockets_skip_the_access_rules_the_public_ports_keep(
    start: Callable[..., ServerProcess], repository: Path
) -> None:
    restricted = {"apis": ["inference"], "header": "x-key", "values_from_env": "TEST_KEY"}
    server = start(
        repository, settings={**TWO, "restricted_apis": [restricted]}, env={"TEST_KEY": "k"}
    )
    public = httpx.post(f"{server.url}/v2/models/slow/infer", json=slow_body(), timeout=30)
    assert public.status_code == 403
    held = {path for pid in served_by(server.process.pid) for path in unix_socket_paths(pid)}
    private_socket = next(path for path in held if path.endswith("/rest-0.sock"))
    transport = httpx.HTTPTransport(uds=private_socket)
    with httpx.Client(transport=transport, base_url="http://inferd.internal") as private:
        assert answered_by(private.post("/v2/models/slow/infer", json=slow_body())) in (
            served_by(server.process.pid)
        )
