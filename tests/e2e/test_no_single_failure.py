"""SIGKILL of any one process below ``inferd start`` under load: the server serves on.

A few clients send a bounded number of requests each on keep-alive connections; once
requests flow, one process is killed; the test counts what was lost (issue #43, docs
"What each process's death costs"). One server per layout, each kill waiting until
what was killed is replaced before the next:

- the default layout (2 protocol processes forked from their parent, the model
  copied into each): a protocol process loses at most the requests in flight on its
  own connections (reset); its fork parent loses nothing;
- ``parallel_workers: 2`` (a lone server, the model's 2 workers forked from their
  parent): a worker loses at most the one request it ran; their fork parent nothing;
  a model's only worker (``workers: 1``) loses at most the one request it ran too:
  the others wait for its restart;
- a hosted model (``workers: 1``) under 3 protocol processes: as the default layout;
  the model host loses at most the requests it held (one per client: 503), and its
  one worker at most the one it ran: the requests sent meanwhile wait for the
  restart.

No request is ever refused a connection after a kill.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferd.supervisor.protocol_parent import HOST_NAME
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.procstat import (
    children,
    forked_protocol_processes,
    is_fork_parent,
    is_forked_worker,
    is_model_host,
    protocol_parent,
)
from tests.support.serverproc import LEFT_OUT, ServerProcess, start_server

CLIENTS = 4
REQUESTS = 150  # per client: a few seconds of load on 2 busy cores
KILL_AFTER = 40  # answers before the kill
TIMEOUT = 20.0
BODY = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}],
    "parameters": {"sleep": 0.002},  # a request in flight on each busy process
}

Outcome = httpx.Response | httpx.HTTPError


def _client(server: ServerProcess, model: str, outcomes: list[Outcome]) -> None:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
        for _ in range(REQUESTS):
            try:
                outcomes.append(client.post(f"/v2/models/{model}/infer", json=BODY))
            except httpx.HTTPError as error:  # a reset connection, or a refused one
                outcomes.append(error)


def _pid(response: httpx.Response) -> int:
    outputs = {output["name"]: output["data"] for output in response.json()["outputs"]}
    return int(outputs["pid"][0])


def kill_under_load(
    server: ServerProcess, model: str, victim: Callable[[list[Outcome]], int]
) -> list[Outcome]:
    """The outcomes of CLIENTS x REQUESTS requests, ``victim(outcomes so far)`` killed
    once KILL_AFTER were answered; only what failed."""
    outcomes: list[Outcome] = []
    clients = [
        threading.Thread(target=_client, args=(server, model, outcomes)) for _ in range(CLIENTS)
    ]
    for client in clients:
        client.start()
    try:
        wait_for(lambda: len(outcomes) >= KILL_AFTER, server.log, 60, 0.005)
        os.kill(victim(list(outcomes)), signal.SIGKILL)
    finally:
        for client in clients:
            client.join(REQUESTS * TIMEOUT)
    assert len(outcomes) == CLIENTS * REQUESTS
    return [o for o in outcomes if not (isinstance(o, httpx.Response) and o.status_code == 200)]


def describe(failed: list[Outcome]) -> list[str]:
    return [
        f"{o.status_code} {o.text[:200]}" if isinstance(o, httpx.Response) else repr(o)
        for o in failed
    ]


def assert_at_most_in_flight_reset(failed: list[Outcome]) -> None:
    """What a protocol process's death may cost: the requests in flight on its
    connections (at most one per client), reset; never a refused connection, never
    an error answered."""
    assert len(failed) <= CLIENTS, describe(failed)
    assert all(
        isinstance(o, httpx.TransportError) and not isinstance(o, httpx.ConnectError)
        for o in failed
    ), describe(failed)


def _last_served(outcomes: list[Outcome]) -> int:
    answered = [o for o in outcomes if isinstance(o, httpx.Response) and o.status_code == 200]
    return _pid(answered[-1])


def _protocol_layout(tmp_path: Path, settings: dict[str, Any], **model: Any) -> Iterator[Any]:
    add_custom_model(tmp_path, "echo", "SlowEcho", **model)
    with start_server(tmp_path, {"shutdown_grace_seconds": 2, **settings}) as server:
        yield server


@pytest.fixture(scope="module")
def default_layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from _protocol_layout(tmp_path_factory.mktemp("default"), {"protocol_processes": 2})


@pytest.fixture(scope="module")
def hosted_layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("hosted")
    # The server's default parallel_workers (1): the host runs the model in one worker.
    settings = {"protocol_processes": 3, "parallel_workers": LEFT_OUT}
    yield from _protocol_layout(root, settings, workers=1)


@pytest.fixture(scope="module")
def forked_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("workers")
    add_custom_model(root, "echo", "SlowEcho")
    add_custom_model(root, "alone", "SlowEcho", workers=1)  # in one of the server's own
    settings = {"protocol_processes": 1, "parallel_workers": 2, "shutdown_grace_seconds": 2}
    with start_server(root, settings) as server:
        yield server


def _kill_a_protocol_process(server: ServerProcess, count: int) -> None:
    before = forked_protocol_processes(server.process.pid)
    assert len(before) == count, server.log()

    def a_protocol_process(outcomes: list[Outcome]) -> int:
        served = _last_served(outcomes)
        return served if served in before else min(before)  # hosted: the host answered

    served_before = server.log().count(") is serving")
    failed = kill_under_load(server, "echo", a_protocol_process)
    assert_at_most_in_flight_reset(failed)
    wait_for(lambda: server.log().count(") is serving") > served_before, server.log, 30)


def _kill_the_protocol_fork_parent(server: ServerProcess, count: int) -> None:
    parent = protocol_parent(server.process.pid)
    assert parent is not None
    processes = forked_protocol_processes(server.process.pid)
    failed = kill_under_load(server, "echo", lambda _: parent)
    assert failed == [], describe(failed)
    assert forked_protocol_processes(server.process.pid) == processes  # none died with it
    wait_for(lambda: protocol_parent(server.process.pid) not in (None, parent), server.log, 30)


def test_default_layout_a_protocol_process(default_layout: ServerProcess) -> None:
    _kill_a_protocol_process(default_layout, 2)


def test_default_layout_the_protocol_fork_parent(default_layout: ServerProcess) -> None:
    _kill_the_protocol_fork_parent(default_layout, 2)


def test_hosted_model_a_protocol_process(hosted_layout: ServerProcess) -> None:
    assert "Model 'echo' runs in the model host" in hosted_layout.log()
    _kill_a_protocol_process(hosted_layout, 3)


def test_hosted_model_the_protocol_fork_parent(hosted_layout: ServerProcess) -> None:
    host = _model_host(hosted_layout.process.pid)  # forked by it: the supervisor's child
    _kill_the_protocol_fork_parent(hosted_layout, 3)
    assert _model_host(hosted_layout.process.pid) == host  # it did not die with its parent


def _forked_workers(server: ServerProcess) -> set[int]:
    return {pid for pid in children(server.process.pid) if is_forked_worker(pid)}


def test_forked_workers_a_worker(forked_workers: ServerProcess) -> None:
    server = forked_workers
    before = _forked_workers(server)
    assert len(before) == 2, server.log()
    failed = kill_under_load(server, "echo", _last_served)
    # The one request it ran: retried on the other worker (retry_on_worker_failure), or 503.
    assert len(failed) <= 1, describe(failed)
    assert all(isinstance(o, httpx.Response) and o.status_code == 503 for o in failed)
    wait_for(lambda: len(_forked_workers(server) - before) == 1, server.log, 30)


def test_forked_workers_their_fork_parent(forked_workers: ServerProcess) -> None:
    server = forked_workers
    (parent,) = [pid for pid in children(server.process.pid) if is_fork_parent(pid)]
    workers = _forked_workers(server)
    failed = kill_under_load(server, "echo", lambda _: parent)
    assert failed == [], describe(failed)
    assert _forked_workers(server) == workers  # none died with it
    wait_for(lambda: "Loaded model 'echo' in its fork parent" in server.log().split(
        "The fork parent of model 'echo' died")[-1], server.log, 30)  # fmt: skip


def test_a_models_only_worker(forked_workers: ServerProcess) -> None:
    server = forked_workers
    spawned = {pid for pid in children(server.process.pid) if not is_forked_worker(pid)}
    restarts = server.log().count("Restarted ")
    failed = kill_under_load(server, "alone", _last_served)
    # The one request it ran (alone: the suspect of its death, not retried); the others
    # waited for the restart instead of 503 "No worker process holding model".
    assert len(failed) <= 1, describe(failed)
    assert all(isinstance(o, httpx.Response) and o.status_code == 503 for o in failed)
    assert server.log().count("Restarted ") > restarts
    assert spawned - children(server.process.pid)  # it was killed, and is back


def _model_host(supervisor: int) -> int:
    """The model host: forked by the protocol fork parent, as the protocol processes
    are (named so: its environ is its parent's)."""
    (host,) = [pid for pid in children(supervisor) if is_model_host(pid)]
    return host


def test_hosted_model_the_hosts_one_worker(hosted_layout: ServerProcess) -> None:
    server = hosted_layout
    (worker,) = children(_model_host(server.process.pid))
    failed = kill_under_load(server, "echo", lambda _: worker)
    # The one request it ran; the others waited in the host's queue for the restart.
    assert len(failed) <= 1, describe(failed)
    assert all(isinstance(o, httpx.Response) and o.status_code == 503 for o in failed)
    wait_for(lambda: children(_model_host(server.process.pid)) - {worker}, server.log, 30)


def test_hosted_model_the_model_host(hosted_layout: ServerProcess) -> None:
    server = hosted_layout
    host = _model_host(server.process.pid)
    failed = kill_under_load(server, "echo", lambda _: host)
    # What it held (one request per client at most, 503); the requests sent while it
    # was restarted waited for it in the protocol processes.
    assert len(failed) <= CLIENTS, describe(failed)
    assert all(isinstance(o, httpx.Response) and o.status_code == 503 for o in failed), describe(
        failed
    )
    assert _model_host(server.process.pid) != host
    # Forked again by the protocol fork parent, as at the start: its imports are shared.
    assert Path(f"/proc/{_model_host(server.process.pid)}/comm").read_text().strip() == HOST_NAME


def _oom_score(pid: int) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


def test_the_oom_killer_takes_what_is_cheapest_to_replace_first(
    hosted_layout: ServerProcess, forked_workers: ServerProcess
) -> None:
    # workers/oom_score.py: forked processes first, then spawned ones, then the model
    # host; fork parents, the supervisor and a lone server last (their base).
    supervisor = hosted_layout.process.pid
    base = _oom_score(supervisor)
    parent, forked = protocol_parent(supervisor), forked_protocol_processes(supervisor)
    host = _model_host(supervisor)
    (host_worker,) = children(host)
    expected = {
        parent: base,
        **{pid: base + 600 for pid in forked},
        host: base + 200,
        host_worker: base + 400,
    }
    lone = forked_workers.process.pid
    for pid in children(lone):
        expected[pid] = base + (600 if is_forked_worker(pid) else 0 if is_fork_parent(pid) else 400)
    expected[lone] = base
    assert {pid: _oom_score(pid) for pid in expected} == {
        pid: min(score, 1000) for pid, score in expected.items()
    }
