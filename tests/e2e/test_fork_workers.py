"""Workers forked from a parent that loaded the model once (``fork_workers``, on by
default for a model run by two or more workers).

Each server here serves one model with 1 or 4 workers and default settings (so 1
worker is spawned and loads the model, 4 are forked); the costs compared are the
proportional set size (PSS) of the server's whole process tree and the time from
``inferd start`` to the model READY (warm-up included). The machine the tests run
on may have 2 cores shared with other work, so the start-time bound has
``START_SLACK`` seconds of slack on top of the issue's 1.5x.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import joblib
import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier

from tests.support.models import SKLEARN, add_custom_model, write_model_folder
from tests.support.polling import wait_for
from tests.support.procstat import (
    children,
    descendants,
    is_fork_parent,
    is_forked_worker,
    tree_pss_mib,
)
from tests.support.serverproc import ServerProcess, start_server

from .test_environments import add_probe_model, make_environment, seen

# What one more worker may add to the process tree's PSS (MiB).
PSS_PER_WORKER_LIMIT = 40.0
# Slack on the 4-workers-vs-1 start time (s): 2 shared cores run 4 warm-ups at once,
# and other work shares them. A load takes LOAD_SECONDS more, so 4 loads one after
# another (workers that each load the model) would be READY 3 x LOAD_SECONDS later.
START_SLACK = 1.0
LOAD_SECONDS = 1.0
HEAVY_WIDTH = 4096  # HeavyWeights' input width (tests/e2e/runtimes/testmodels.py)
FOREST_FEATURES = 4


def _warmup(dims: int) -> list[dict[str, Any]]:
    inputs = {"x": {"data_type": "TYPE_FP64", "dims": [dims], "zero_data": True}}
    return [{"name": "zeros", "count": 1, "inputs": inputs}]


def _heavy_repository(root: Path, load_seconds: float = LOAD_SECONDS) -> Path:
    """A custom runtime holding 128 MiB of numpy weights, slow to load, warmed up."""
    add_custom_model(
        root,
        "heavy",
        "HeavyWeights",
        max_batch_size=8,
        model_warmup=_warmup(HEAVY_WIDTH),
        parameters={"extra": {"load_seconds": load_seconds}},
    )
    return root


def _forest_repository(root: Path) -> Path:
    """A scikit-learn RandomForest of about 25 MB as joblib, warmed up on load."""
    rng = np.random.default_rng(0)
    features = rng.random((20000, FOREST_FEATURES))
    labels = rng.integers(0, 2, len(features))  # noise: deep trees, a big model quickly
    forest = RandomForestClassifier(n_estimators=30, max_features=1, random_state=0, n_jobs=2)
    folder = write_model_folder(
        root,
        "forest",
        SKLEARN,
        parameters={"uri": "./model.joblib"},
        max_batch_size=8,
        model_warmup=_warmup(FOREST_FEATURES),
    )
    joblib.dump(forest.fit(features, labels), folder / "model.joblib")
    return root


# What these tests measure and look at is one server process's tree (its workers'
# fork parent, their memory): the layout of a lone server, whatever
# $INFERD_TEST_PROTOCOL_PROCESSES says. With protocol processes the same models run in
# the model host's workers (its own fork parents); test_protocol_forks.py covers those.
ONE_PROCESS = {"protocol_processes": 1}


def _start_timed(repository: Path, workers: int) -> tuple[ServerProcess, float]:
    """A server with ``workers`` workers (default settings otherwise: forked from 2 on)
    and the seconds it took to be READY."""
    begun = time.monotonic()
    server = start_server(
        repository,
        {"parallel_workers": workers, **ONE_PROCESS},
        log_dir=repository,
    )
    return server, time.monotonic() - begun


Measured = dict[int, tuple[ServerProcess, float, float]]  # workers -> server, ready s, MiB


def _measure(repository: Path) -> Iterator[Measured]:
    """1 then 4 workers, one server at a time: each one's ready time and tree PSS."""
    measured: Measured = {}
    try:
        for workers in (1, 4):
            server, ready = _start_timed(repository, workers)
            measured[workers] = (server, ready, tree_pss_mib(server.process.pid))
        yield measured
    finally:
        for server, _, _ in measured.values():
            server.stop()


@pytest.fixture(scope="module")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Measured]:
    yield from _measure(_heavy_repository(tmp_path_factory.mktemp("heavy")))


@pytest.fixture(scope="module")
def forest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Measured]:
    yield from _measure(_forest_repository(tmp_path_factory.mktemp("forest")))


def _per_added_worker(measured: Measured) -> float:
    return (measured[4][2] - measured[1][2]) / 3


def _summary(measured: Measured) -> dict[int, tuple[float, float]]:
    return {count: (round(ready, 2), round(pss)) for count, (_, ready, pss) in measured.items()}


def test_added_workers_share_a_heavy_custom_model(heavy: Measured) -> None:
    print("heavy: workers -> (ready s, PSS MiB)", _summary(heavy))
    assert _per_added_worker(heavy) <= PSS_PER_WORKER_LIMIT, heavy
    # The 128 MiB of weights are in the tree once, not once per worker: three added
    # workers add less than one more copy.
    assert heavy[4][2] - heavy[1][2] < 128, heavy


def test_added_workers_share_a_scikit_learn_forest(forest: Measured) -> None:
    print("forest: workers -> (ready s, PSS MiB)", _summary(forest))
    assert _per_added_worker(forest) <= PSS_PER_WORKER_LIMIT, forest
    server = forest[4][0]
    body = {"inputs": [{"name": "x", "datatype": "FP64", "shape": [2, 4], "data": [0.5] * 8}]}
    response = httpx.post(f"{server.url}/v2/models/forest/infer", json=body, timeout=10)
    assert response.status_code == 200, response.text


def test_four_workers_are_ready_about_as_soon_as_one(heavy: Measured) -> None:
    one, four = heavy[1][1], heavy[4][1]
    assert one > LOAD_SECONDS, one
    assert four <= 1.5 * one + START_SLACK, (one, four)


def _infer_pid(server: ServerProcess) -> int | None:
    """The pid of the worker that answered a heavy request; None if none did."""
    body = {"inputs": [{"name": "x", "datatype": "FP64", "shape": [1, HEAVY_WIDTH],
                        "data": [0.5] * HEAVY_WIDTH}]}  # fmt: skip
    try:
        response = httpx.post(f"{server.url}/v2/models/heavy/infer", json=body, timeout=5)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    outputs = {output["name"]: output["data"] for output in response.json()["outputs"]}
    return int(outputs["pid"][0])


def _fork_parent(server: ServerProcess) -> int:
    """The server's one fork parent."""
    parents = [pid for pid in children(server.process.pid) if is_fork_parent(pid)]
    assert len(parents) == 1, parents
    return parents[0]


def _forked(server: ServerProcess) -> set[int]:
    """The server's forked workers (adopted by it: its children, not their parent's)."""
    return {pid for pid in children(server.process.pid) if is_forked_worker(pid)}


def test_one_worker_is_spawned_by_default_and_forked_when_fork_workers_is_true(
    heavy: Measured, tmp_path: Path
) -> None:
    server = heavy[1][0]  # by default: a parent would be one process more, sharing nothing
    assert not any(is_fork_parent(pid) for pid in children(server.process.pid))
    assert _infer_pid(server) in children(server.process.pid)
    repository = _heavy_repository(tmp_path, load_seconds=0)
    settings = {"parallel_workers": 1, "fork_workers": True, **ONE_PROCESS}
    with start_server(repository, settings, log_dir=repository) as forked:
        _fork_parent(forked)
        assert _infer_pid(forked) in _forked(forked)


def test_a_killed_worker_serves_again_within_a_second(heavy: Measured) -> None:
    server = heavy[4][0]
    killed = _infer_pid(server)
    before = _forked(server)
    assert killed is not None and killed in before
    restarted = server.log().count("Restarted ")
    begun = time.monotonic()
    os.kill(killed, signal.SIGKILL)
    # Forked again from the same parent (no load), its model adopted and warmed up.
    (new,) = wait_for(lambda: (_forked(server) - before) or None, server.log, 10, 0.005)
    wait_for(lambda: server.log().count("Restarted ") > restarted, server.log, 10, 0.005)
    took = time.monotonic() - begun
    assert took < 1.0, took
    assert _forked(server) == before - {killed} | {new}
    assert all(_infer_pid(server) is not None for _ in range(8))


def test_a_reloaded_model_gets_a_new_fork_parent(heavy: Measured) -> None:
    server = heavy[4][0]
    before = _fork_parent(server)
    response = httpx.post(f"{server.url}/v2/repository/models/heavy/load", timeout=30)
    assert response.status_code == 200, response.text
    wait_for(lambda: before not in descendants(server.process.pid), server.log, 10)
    after = _fork_parent(server)
    assert after != before and len(_forked(server)) == 4
    assert _infer_pid(server) in _forked(server)


def test_a_model_whose_load_leaves_a_thread_is_loaded_in_each_worker(
    start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    add_custom_model(tmp_path, "threads", "ThreadOnLoad")
    server = start(tmp_path, settings={"parallel_workers": 2, "fork_workers": True, **ONE_PROCESS})
    assert_loaded_in_each_worker(server, "threads", "threads are running (left-by-load)")


def assert_loaded_in_each_worker(server: ServerProcess, model: str, why: str) -> None:
    """The parent refused to fork, said why, and the server's own 2 workers serve."""
    assert "not forked from one parent" in server.log()
    assert why in server.log()
    workers = children(server.process.pid)
    assert len(workers) == 2 and not any(is_fork_parent(pid) for pid in workers)
    body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [7]}]}
    response = httpx.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=10)
    assert response.status_code == 200, response.text


def test_a_model_whose_load_keeps_a_connection_is_loaded_in_each_worker(
    start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    # Forked workers would share the one connection, and read each other's replies.
    with socket.create_server(("127.0.0.1", 0)) as listener:  # connects queue, unaccepted
        port = listener.getsockname()[1]
        add_custom_model(
            tmp_path, "connected", "ConnectsOnLoad", parameters={"extra": {"port": port}}
        )
        server = start(
            tmp_path, settings={"parallel_workers": 2, "fork_workers": True, **ONE_PROCESS}
        )
        assert_loaded_in_each_worker(server, "connected", "socket(s) it opened are still open")


def test_a_dead_fork_parent_is_replaced_while_its_workers_serve_on(forest: Measured) -> None:
    server = forest[4][0]
    parent = _fork_parent(server)
    workers = _forked(server)
    os.kill(parent, signal.SIGKILL)  # its workers are the server's: they serve on
    parents = lambda: [pid for pid in children(server.process.pid) if is_fork_parent(pid)]  # noqa: E731
    wait_for(lambda: parents() not in ([], [parent]), server.log, 30)
    assert _forked(server) == workers
    wait_for(lambda: "Loaded model 'forest' in its fork parent" in server.log().split(
        "The fork parent of model 'forest' died")[-1], server.log, 30)  # fmt: skip
    os.kill(min(workers), signal.SIGKILL)  # forked again, from the new parent
    wait_for(lambda: len(_forked(server) - workers) == 1, server.log, 30)
    body = {"inputs": [{"name": "x", "datatype": "FP64", "shape": [1, 4], "data": [0.5] * 4}]}
    response = httpx.post(f"{server.url}/v2/models/forest/infer", json=body, timeout=10)
    assert response.status_code == 200, response.text


def test_a_load_that_crashes_its_fork_parent_fails_with_why(heavy: Measured) -> None:
    server = heavy[4][0]
    add_custom_model(server.repository, "crasher", "CrashesOnLoad")
    response = httpx.post(f"{server.url}/v2/repository/models/crasher/load", timeout=30)
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert "Loading model 'crasher' failed: its fork parent" in error, error
    assert "exited with code 3 while loading it" in error, error
    assert _infer_pid(server) is not None  # the other model serves on


def test_a_model_with_its_own_environment_is_forked_from_that_interpreter(
    start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    environment = make_environment(tmp_path / "env", "1.0")
    repository = tmp_path / "models"
    add_probe_model(repository, "probe", environment_path=str(environment))
    server = start(
        repository, settings={"parallel_workers": 2, "fork_workers": True, **ONE_PROCESS}
    )
    assert seen(server, "probe") == ["1.0", str(environment)]
    parent = _fork_parent(server)
    command = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
    assert command[0].decode() == str(environment / "bin" / "python")
    assert len(_forked(server)) == 2
