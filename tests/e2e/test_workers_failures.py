"""Worker processes that die: requests get answers, workers come back, nothing is orphaned."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.procstat import is_running, workers
from tests.support.serverproc import ServerProcess

REQUEST_DEADLINE = 15.0
X = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [0]}]}


def infer(server: ServerProcess, model: str, **parameters: Any) -> httpx.Response:
    body = {**X, "parameters": parameters}
    return httpx.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=REQUEST_DEADLINE)


def pid_of(response: httpx.Response) -> int:
    assert response.status_code == 200, response.text
    outputs = {output["name"]: output["data"][0] for output in response.json()["outputs"]}
    return int(outputs["pid"])


def index_entry(server: ServerProcess, name: str) -> dict[str, Any]:
    index = httpx.post(f"{server.url}/v2/repository/index", json={}, timeout=10).json()
    (entry,) = [entry for entry in index if entry["name"] == name]
    return entry


@pytest.fixture
def two_workers(tmp_path: Path, start: Callable[..., ServerProcess]) -> ServerProcess:
    # Not retried, so that a request lost with its worker shows (see test_workers_faults.py
    # for the retries).
    add_custom_model(tmp_path, "where", "WhereAmI", retry_on_worker_failure=False)
    add_custom_model(tmp_path, "alone", "WhereAmI", workers=1)
    # The server's own two workers, each holding both models (fork_workers would give
    # "where" 2 forked workers and "alone" its spawned one: test_fork_workers.py).
    server = start(tmp_path, settings={"parallel_workers": 2, "fork_workers": False})
    # workers() finds them under the server or, with protocol processes, under the model host.
    wait_for(lambda: len(workers(server.process.pid)) == 2, "two worker processes")
    return server


def hammer(server: ServerProcess, stop: threading.Event, answers: list[Any]) -> None:
    with httpx.Client(base_url=server.url, timeout=REQUEST_DEADLINE) as client:
        while not stop.is_set():
            body = {**X, "parameters": {"sleep": 0.05}}
            try:
                answers.append(client.post("/v2/models/where/infer", json=body))
            except httpx.HTTPError as error:  # a hang (timeout) or a dropped connection
                answers.append(error)


def test_a_worker_killed_under_load_fails_only_its_requests_and_comes_back(
    two_workers: ServerProcess,
) -> None:
    server = two_workers
    before = workers(server.process.pid)  # spawned or forked
    stop, answers = threading.Event(), []
    clients = [threading.Thread(target=hammer, args=(server, stop, answers)) for _ in range(6)]
    for client in clients:
        client.start()
    try:
        wait_for(lambda: len(answers) > 10, "requests flowing")
        victim = pid_of(answers[0])  # both workers are busy: 6 clients, 2 workers
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: workers(server.process.pid) - before, "a new worker")
        (restarted,) = workers(server.process.pid) - before
        count = len(answers)

        def restarted_serves() -> bool:
            # The new process exists before it has loaded the model: wait until it answers.
            recent = answers[count:]
            return any(isinstance(a, httpx.Response) and a.status_code == 200
                       and pid_of(a) == restarted for a in recent)  # fmt: skip

        wait_for(restarted_serves, "the restarted worker serving")
    finally:
        stop.set()
        for client in clients:
            client.join(REQUEST_DEADLINE + 5)
    statuses = [a.status_code if isinstance(a, httpx.Response) else repr(a) for a in answers]
    assert set(statuses) <= {200, 503}, "every request gets a result or a 503, none hangs"
    lost = [a for a in answers if isinstance(a, httpx.Response) and a.status_code == 503]
    assert lost, "the killed worker had a request in flight"
    assert "stopped before answering" in lost[0].json()["error"]
    served = {pid_of(a) for a in answers[count:] if a.status_code == 200}
    assert restarted in served and victim not in served


def test_a_model_only_in_a_killed_worker_waits_for_it_to_be_back(
    two_workers: ServerProcess,
) -> None:
    server = two_workers
    victim = pid_of(infer(server, "alone"))
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: not is_running(victim), "the worker to be gone")
    # Its requests wait for the restart (dispatch/queued.py), as for a busy worker.
    response = infer(server, "alone")
    assert response.status_code == 200, response.text
    assert pid_of(response) != victim
    assert infer(server, "where").status_code == 200


def test_a_load_that_crashes_its_worker_fails_with_why(
    two_workers: ServerProcess, tmp_path: Path
) -> None:
    server = two_workers
    add_custom_model(tmp_path, "crasher", "CrashesOnLoad", workers=1)
    response = httpx.post(f"{server.url}/v2/repository/models/crasher/load", timeout=30)
    assert response.status_code == 503
    error = response.json()["error"]
    assert "Loading model 'crasher' failed" in error and "exited with code 3" in error
    entry = index_entry(server, "crasher")
    assert entry["state"] == "UNAVAILABLE" and "exited with code 3" in entry["reason"]
    wait_for(lambda: infer(server, "alone").status_code == 200, "the worker restarted")
    assert wait_for(lambda: len(workers(server.process.pid)) == 2, "two workers again")


def test_a_model_whose_reload_keeps_crashing_ends_unavailable(
    two_workers: ServerProcess, tmp_path: Path
) -> None:
    server = two_workers
    add_custom_model(tmp_path, "fragile", "CrashesOnReload", workers=1)
    load = httpx.post(f"{server.url}/v2/repository/models/fragile/load", timeout=30)
    assert load.status_code == 200, load.text
    os.kill(pid_of(infer(server, "fragile")), signal.SIGKILL)

    def unavailable() -> dict[str, Any] | None:
        entry = index_entry(server, "fragile")
        return entry if entry["state"] == "UNAVAILABLE" else None

    entry = wait_for(unavailable, "the model to be given up", timeout=60)
    assert "times in a row" in entry["reason"], entry
    response = infer(server, "fragile")
    assert response.status_code == 503 and "times in a row" in response.json()["error"]
    wait_for(lambda: infer(server, "alone").status_code == 200, "the other models back")
    assert infer(server, "where").status_code == 200


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_worker_outlives_the_server(two_workers: ServerProcess, sig: signal.Signals) -> None:
    server = two_workers
    found = workers(server.process.pid)
    assert len(found) == 2
    server.process.send_signal(sig)
    server.process.wait(30)
    wait_for(lambda: not any(is_running(pid) for pid in found), "the workers to exit", 10)
