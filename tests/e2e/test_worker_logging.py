"""Triton's logging extension reaches the worker processes, restarted ones included.

A runtime logs a DEBUG line in every predict. At the server's default level
(INFO) the line is not written; once a client turns verbose logging on, the
worker that runs the request writes it, and a worker killed and restarted
starts at the new level; turned off again, the lines stop. The workers of
per-model environments follow too, those of an environment started later included.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton_http

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.procstat import workers as worker_pids
from tests.support.serverproc import ServerProcess, start_server

from .test_environments import make_environment

_request_ids = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("worker-logging")
    add_custom_model(repository, "chatty", "LogsAtDebug")
    with start_server(repository, settings={"parallel_workers": 2}) as process:
        yield process


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[triton_http.InferenceServerClient]:
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as opened:
        yield opened


def infer(client: triton_http.InferenceServerClient, model: str = "chatty") -> tuple[str, int]:
    """Run one request; its id and the pid of the worker that ran it."""
    request_id = f"logged-{next(_request_ids)}"
    tensor = triton_http.InferInput("x", [1], "INT64")
    tensor.set_data_from_numpy(np.zeros(1, np.int64))
    result = client.infer(model, [tensor], request_id=request_id)
    return request_id, int(result.as_numpy("pid")[0])


def debug_line(server: ServerProcess, request_id: str, pid: int) -> bool:
    return f"debug line of {request_id} from pid {pid}" in server.log()


def test_the_log_level_reaches_every_worker_and_their_restarts(
    server: ServerProcess, client: triton_http.InferenceServerClient
) -> None:
    request_id, pid = infer(client)
    assert pid != server.process.pid  # run by a worker
    # The worker logged before it answered: a line not there now never comes.
    assert not debug_line(server, request_id, pid)

    assert client.update_log_settings({"log_verbose_level": 1})["log_verbose_level"] == 1
    request_id, pid = infer(client)
    assert debug_line(server, request_id, pid)

    # Killed, the worker is restarted, and its model loaded again: the new process
    # logs at the level set before it started.
    workers = worker_pids(server.process.pid)  # spawned or forked
    assert len(workers) == 2 and pid in workers
    os.kill(pid, signal.SIGKILL)
    request_id, new_pid = wait_for(
        lambda: (answer := infer(client))[1] not in workers and answer,
        "a request run by the restarted worker",
    )
    assert debug_line(server, request_id, new_pid)

    assert client.update_log_settings({"log_verbose_level": 0})["log_verbose_level"] == 0
    request_id, pid = infer(client)
    assert not debug_line(server, request_id, pid)


def test_workers_of_model_environments_follow_the_level(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    repository = tmp_path / "models"
    for name in ("early", "late"):
        environment = make_environment(tmp_path / f"env-{name}", "1.0")
        add_custom_model(
            repository, name, "LogsAtDebug", parameters={"environment_path": str(environment)}
        )
    settings = {"parallel_workers": 1, "load_models_at_startup": False}
    server = start(repository, settings=settings)

    def load(name: str) -> None:
        loaded = httpx.post(f"{server.url}/v2/repository/models/{name}/load", timeout=60)
        assert loaded.status_code == 200, loaded.text

    load("early")  # its environment's workers start at the default level
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as client:
        client.update_log_settings({"log_verbose_level": 1})
        load("late")  # its environment's workers start after the change
        for name in ("early", "late"):
            request_id, pid = infer(client, name)
            assert debug_line(server, request_id, pid), name
    assert server.log().count("Starting worker processes in environment") == 2
