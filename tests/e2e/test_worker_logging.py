"""Triton's logging extension reaches the worker processes, restarted ones included.

A runtime logs a DEBUG line in every predict. At the server's default level
(INFO) the line is not written; once a client turns verbose logging on, the
worker that runs the request writes it, and a worker killed and restarted
starts at the new level; turned off again, the lines stop.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as triton_http

from tests.support.procstat import children
from tests.support.serverproc import ServerProcess, start_server

from .conftest import add_custom_model, wait_for

_request_ids = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("worker-logging")
    add_custom_model(repository, "chatty", "LogsAtDebug")
    process = start_server(repository, settings={"parallel_workers": 2})
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[triton_http.InferenceServerClient]:
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as opened:
        yield opened


def infer(client: triton_http.InferenceServerClient) -> tuple[str, int]:
    """Run one request; its id and the pid of the worker that ran it."""
    request_id = f"logged-{next(_request_ids)}"
    tensor = triton_http.InferInput("x", [1], "INT64")
    tensor.set_data_from_numpy(np.zeros(1, np.int64))
    result = client.infer("chatty", [tensor], request_id=request_id)
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
    workers = children(server.process.pid)
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
