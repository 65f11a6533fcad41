"""A model loaded after the start is loaded once per server, however it is loaded
(issue #43): through the repository API, by the repository poll, on a request, a
reload of a model copied at start. With 3 protocol processes and default settings
such a model runs in the model host (host/on_demand.py ``placement``),
so each protocol process pays no copy of it: loaded in each it would cost its
weights (``HEAVY_MIB``) three times.

Each protocol process's proportional set size (PSS) is read before the load and
after the model answered through it; the model answers from every process (each
asked on its private socket) with one pid, the one process that holds it. A killed
host or protocol process places it alike after its restart (the journal holds the
load marked ``hosted``); with ``parallel_workers: 2`` a later load is forked into
the host's workers from one loaded copy.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.each_process import ask_each
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.procstat import (
    PROC,
    is_forked_worker,
    pss_kib,
    served_by,
    serving_processes,
    workers,
)
from tests.support.serverproc import LEFT_OUT, ServerProcess, start_server

# What a model loaded later may add to each protocol process (MiB of PSS): the issue's
# bound for an added process; a copy of the model would add HEAVY_MIB.
PER_PROCESS_LIMIT = 40.0
HEAVY_MIB = 96
PROCESSES = 3
WIDTH = 4096  # HeavyWeights' input width (tests/e2e/runtimes/testmodels.py)
BODY = {"inputs": [{"name": "x", "datatype": "FP64", "shape": [1, WIDTH], "data": [0.5] * WIDTH}]}
SETTINGS = {
    "parallel_workers": LEFT_OUT,  # default: a model loaded at start is copied into each
    "protocol_processes": PROCESSES,
    "shutdown_grace_seconds": 5,
}


def _add_heavy(repository: Path, name: str, megabytes: int = HEAVY_MIB) -> None:
    add_custom_model(
        repository, name, "HeavyWeights", parameters={"extra": {"megabytes": megabytes}}
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("later")
    _add_heavy(repository, "at_start", megabytes=16)
    started = start_server(repository, SETTINGS)
    try:
        yield started
    finally:
        started.stop()


def _pss_mib(server: ServerProcess) -> dict[int, float]:
    """Each protocol process's PSS (MiB), by pid."""
    return {pid: pss_kib(pid) / 1024 for pid in serving_processes(server.process.pid)}


def _pids_answering(server: ServerProcess, model: str) -> set[int]:
    """The pid each protocol process's answer of ``model`` names (asked on its own socket)."""
    answers = ask_each(server, "POST", f"/v2/models/{model}/infer", json=BODY)
    assert len(answers) == PROCESSES and all(a.status_code == 200 for a in answers), [
        a.text for a in answers
    ]
    return {int(_output(answer, "pid")) for answer in answers}


def _output(answer: httpx.Response, name: str) -> float:
    return float(next(o["data"][0] for o in answer.json()["outputs"] if o["name"] == name))


def _assert_loaded_once(server: ServerProcess, model: str, before: dict[int, float]) -> None:
    """``model`` answers from every protocol process, run by one process that is none of
    them, and no protocol process grew by a copy of it."""
    pids = _pids_answering(server, model)
    assert len(pids) == 1 and not pids & set(before), (pids, before)
    after = _pss_mib(server)
    added = {pid: round(after[pid] - before[pid], 1) for pid in before}
    print(f"{model}: MiB added per protocol process {added}")
    assert set(after) == set(before), "a protocol process restarted"
    assert all(growth <= PER_PROCESS_LIMIT for growth in added.values()), added


def test_a_model_loaded_through_the_repository_api_is_one_copy(server: ServerProcess) -> None:
    before = _pss_mib(server)
    _add_heavy(server.repository, "heavy")
    response = httpx.post(f"{server.url}/v2/repository/models/heavy/load", timeout=60)
    assert response.status_code == 200, response.text
    _assert_loaded_once(server, "heavy", before)
    # In the host's own process, as a protocol process runs its copy: no worker, one hop.
    assert not workers(server.process.pid)
    log = server.log()
    assert "Model 'heavy' runs in the model host, once, for every protocol process" in log, log
    assert log.count("runs in the model host, once, for every protocol process: it is loaded") == 1


def test_a_killed_model_host_loads_what_was_placed_there_again(server: ServerProcess) -> None:
    """The journal holds the load marked ``hosted``: the restarted host loads ``heavy``
    again in its own process, and every protocol process's binding finds it."""
    (host,) = _pids_answering(server, "heavy")
    os.kill(host, signal.SIGKILL)  # the host: heavy runs in its own process

    def answered_again() -> set[int] | None:
        try:
            pids = _pids_answering(server, "heavy")
        except (AssertionError, httpx.HTTPError):  # 503 or waiting while it restarts
            return None
        return pids if len(pids) == 1 else None

    (again,) = wait_for(answered_again, server.log, 90, 0.2)
    assert again != host and again in served_by(server.process.pid)  # the new host


def test_a_restarted_protocol_process_binds_what_was_placed_in_the_host(
    server: ServerProcess,
) -> None:
    """It catches up from the journal, whose load of ``heavy`` is marked ``hosted``:
    it binds, as the others did, rather than loading a copy."""
    (host,) = _pids_answering(server, "heavy")
    killed = min(serving_processes(server.process.pid))
    os.kill(killed, signal.SIGKILL)

    def replaced() -> set[int] | None:
        processes = serving_processes(server.process.pid)
        return processes if len(processes) == PROCESSES and killed not in processes else None

    wait_for(replaced, server.log, 60, 0.1)
    wait_for(lambda: _answers_everywhere(server, "heavy"), server.log, 60, 0.1)
    assert _pids_answering(server, "heavy") == {host}


def _answers_everywhere(server: ServerProcess, model: str) -> bool:
    try:
        _pids_answering(server, model)
    except (AssertionError, httpx.HTTPError):  # a process still starting
        return False
    return True


def test_a_model_copied_at_start_is_reloaded_into_the_host(server: ServerProcess) -> None:
    """Copied at start (each process answers with its own pid); reloaded through the API
    it runs once, in the host, as any load after the start."""
    copied = _pids_answering(server, "at_start")
    assert copied <= set(_pss_mib(server)), copied  # each protocol process runs its copy
    before = _pss_mib(server)
    response = httpx.post(f"{server.url}/v2/repository/models/at_start/load", timeout=60)
    assert response.status_code == 200, response.text
    _assert_loaded_once(server, "at_start", before)


def test_a_model_found_by_the_repository_poll_is_one_copy(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    _add_heavy(repository, "at_start", megabytes=16)
    server = start_server(repository, {**SETTINGS, "repository_poll_secs": 1})
    try:
        before = _pss_mib(server)
        _add_heavy(repository, "polled")

        def ready_everywhere() -> bool:
            answers = ask_each(server, "GET", "/v2/models/polled/ready")
            return all(answer.status_code == 200 for answer in answers)

        wait_for(ready_everywhere, "the polled model ready in every protocol process", 60)
        _assert_loaded_once(server, "polled", before)
    finally:
        server.stop()


def _private_mib(pid: int) -> float:
    """``pid``'s private pages (USS), MiB: a copy of the model of its own would be there."""
    rollup = (PROC / str(pid) / "smaps_rollup").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in rollup if ":" in line)
    return sum(int(fields[key].split()[0]) for key in ("Private_Clean", "Private_Dirty")) / 1024


def test_a_model_loaded_later_into_forked_workers_is_one_copy(tmp_path: Path) -> None:
    """``parallel_workers: 2``: every model runs in the host's workers, forked from a
    parent that loaded it (fork_workers), a model loaded through the API too: each
    worker holds its own pages, not a copy."""
    repository = tmp_path / "models"
    _add_heavy(repository, "at_start", megabytes=16)
    server = start_server(repository, {**SETTINGS, "parallel_workers": 2})
    try:
        before = workers(server.process.pid)
        _add_heavy(repository, "heavy")
        response = httpx.post(f"{server.url}/v2/repository/models/heavy/load", timeout=60)
        assert response.status_code == 200, response.text
        answers = ask_each(server, "POST", "/v2/models/heavy/infer", json=BODY)
        assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
        added = workers(server.process.pid) - before
        assert len(added) == 2 and all(is_forked_worker(pid) for pid in added), added
        private = {pid: round(_private_mib(pid), 1) for pid in added}
        print(f"heavy in forked workers: private MiB per worker {private}")
        assert all(mib <= PER_PROCESS_LIMIT for mib in private.values()), private
    finally:
        server.stop()


def test_a_model_added_after_the_start_and_loaded_by_a_request_is_one_copy(
    tmp_path: Path,
) -> None:
    """``load_on_request``: a model in the repository at start is adopted from the fork
    parent by each process on its first request (copied, no hop); one added after the
    start is loaded once, in the host, by its first request, and so is the first one
    when a request loads it again after an unload."""
    repository = tmp_path / "models"
    _add_heavy(repository, "at_start", megabytes=16)
    server = start_server(repository, {**SETTINGS, "load_on_request": True})
    try:
        copied = _pids_answering(server, "at_start")
        assert len(copied) == PROCESSES and copied <= set(_pss_mib(server)), copied
        before = _pss_mib(server)
        _add_heavy(repository, "heavy")

        def answered() -> bool:  # 404 while a look at the repository (1 s) predates it
            response = httpx.post(f"{server.url}/v2/models/heavy/infer", json=BODY, timeout=60)
            return response.status_code == 200

        wait_for(answered, server.log, 30, 0.2)
        _assert_loaded_once(server, "heavy", before)
        # Unloaded (as an eviction does), then asked again: the fork parent's copy was
        # adopted once, so this load runs in the host (in each process: a copy each).
        unload = httpx.post(f"{server.url}/v2/repository/models/at_start/unload", timeout=60)
        assert unload.status_code == 200, unload.text
        _assert_loaded_once(server, "at_start", _pss_mib(server))
    finally:
        server.stop()
