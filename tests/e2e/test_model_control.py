"""Triton's model-control flow (tritonclient's simple_http_model_control.py and
simple_grpc_model_control.py): each of their checks, with one protocol process and
with three.

``simple`` batches (``max_batch_size`` 8, as Triton's example model), so with
several protocol processes it runs in the model host; no model is loaded at
start (Triton's explicit model control), so no host runs until the first load
starts it. Each step is checked in every protocol process (each/its private
socket), not only in the one a client's connection landed on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.each_process import ask_each, protocol_sockets
from tests.support.models import add_custom_model, add_triton_model
from tests.support.serverproc import ServerProcess

WRONG_FORMAT = '"parameters": {"config": {{"max_batch_size": "16"}}}'
OVERRIDE = '{"max_batch_size":"16"}'


@pytest.fixture(params=[1, 3], ids=["1-protocol-process", "3-protocol-processes"])
def processes(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def explicit(start: Callable[..., ServerProcess], tmp_path: Path, processes: int) -> ServerProcess:
    """Nothing loaded at start; ``simple`` batches, ``plain`` does not."""
    repository = tmp_path / "models"
    add_custom_model(repository, "simple", "SlowEcho", max_batch_size=8)
    add_custom_model(repository, "plain", "SlowEcho")
    settings = {"protocol_processes": processes, "load_models_at_startup": False}
    server = start(repository, settings=settings)
    assert len(protocol_sockets(server)) == (processes if processes > 1 else 0)
    return server


def every_process(server: ServerProcess, path: str) -> list[Any]:
    """What each protocol process answers at ``path``: its JSON, or its status."""
    return [
        answer.json() if answer.status_code == 200 else answer.status_code
        for answer in ask_each(server, "GET", path)
    ]


def ready_everywhere(server: ServerProcess, model: str) -> list[bool]:
    answers = ask_each(server, "GET", f"/v2/models/{model}/ready")
    return [answer.status_code == 200 for answer in answers]


def batch_size_everywhere(server: ServerProcess, model: str) -> set[int]:
    configs = every_process(server, f"/v2/models/{model}/config")
    return {config["max_batch_size"] for config in configs}


def check_served_as_one(server: ServerProcess, processes: int) -> None:
    """Once loaded with the override: ready, batching 16 in every process, and (with
    several) answered by the one model host."""
    assert all(ready_everywhere(server, "simple"))
    assert batch_size_everywhere(server, "simple") == {16}
    if processes > 1:
        assert "Starting the model host" in server.log()


def test_tritons_http_model_control_flow(explicit: ServerProcess, processes: int) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{explicit.http_port}")
    try:
        assert {entry["name"] for entry in client.get_model_repository_index()} == {
            "simple",
            "plain",
        }
        client.load_model("simple")
        assert client.is_model_ready("simple")
        assert all(ready_everywhere(explicit, "simple"))
        with pytest.raises(InferenceServerException) as wrong:
            client.load_model("simple", config=WRONG_FORMAT)
        assert "failed to load" in str(wrong.value.message())
        client.load_model("simple", config=OVERRIDE)
        assert client.get_model_config("simple")["max_batch_size"] == 16
        check_served_as_one(explicit, processes)
        answered = infer_http(client)
        assert answered == 1.0
        client.unload_model("simple")
        assert not client.is_model_ready("simple")
        assert not any(ready_everywhere(explicit, "simple"))
        check_refused_loads(client, HTTP_STATUS)
        assert not any(ready_everywhere(explicit, "simple"))
    finally:
        client.close()


def test_tritons_grpc_model_control_flow(explicit: ServerProcess, processes: int) -> None:
    client = grpcclient.InferenceServerClient(explicit.grpc_address)
    try:
        index = client.get_model_repository_index()
        assert {model.name for model in index.models} == {"simple", "plain"}
        client.load_model("simple")
        assert client.is_model_ready("simple")
        assert all(ready_everywhere(explicit, "simple"))
        with pytest.raises(InferenceServerException) as wrong:
            client.load_model("simple", config=WRONG_FORMAT)
        assert "failed to load" in str(wrong.value.message())
        client.load_model("simple", config=OVERRIDE)
        assert client.get_model_config("simple").config.max_batch_size == 16
        check_served_as_one(explicit, processes)
        client.unload_model("simple")
        assert not client.is_model_ready("simple")
        assert not any(ready_everywhere(explicit, "simple"))
        check_refused_loads(client, GRPC_STATUS)
        assert not any(ready_everywhere(explicit, "simple"))
    finally:
        client.close()


# What each refusal's InferenceServerException.status() reads, per client.
HTTP_STATUS = {"invalid": "400", "unknown": "404"}
GRPC_STATUS = {"invalid": "StatusCode.INVALID_ARGUMENT", "unknown": "StatusCode.NOT_FOUND"}
LONG_PATH = "file:" + "A" * 256  # one component over NAME_MAX (255 bytes)


def refusal(load: Callable[[], Any]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as refused:
        load()
    return refused.value


def check_refused_loads(client: Any, status: dict[str, str]) -> None:
    """The examples' last checks, worded as Triton's load failures ("failed to load
    '<name>', failed to poll from model repository", which the examples and Triton's
    tests match), each a 4xx that says what was wrong; the server stays live."""
    failed = "failed to load 'simple', failed to poll from model repository: "
    long_path = refusal(lambda: client.load_model("simple", config="{}", files={LONG_PATH: b"a"}))
    assert long_path.message().startswith(failed + "Invalid file path 'file:AAA")
    assert "over the 255 bytes a file name may have (NAME_MAX)" in long_path.message()
    assert long_path.status() == status["invalid"]
    assert client.is_server_live()
    no_config = refusal(lambda: client.load_model("simple", files={"file:1/model.py": b"a"}))
    assert no_config.message().startswith(failed + "file parameters (file:1/model.py) need")
    assert "a 'config' parameter" in no_config.message()
    assert no_config.status() == status["invalid"]
    unknown = refusal(lambda: client.load_model("wrong_model_name"))
    assert unknown.message() == (
        "failed to load 'wrong_model_name', failed to poll from model repository: the model "
        "repository holds no model 'wrong_model_name' (POST /v2/repository/index lists "
        "those it holds)"
    )
    assert unknown.status() == status["unknown"]
    assert not client.is_model_ready("simple")


def infer_http(client: httpclient.InferenceServerClient) -> float:
    x = httpclient.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    result = client.infer("simple", [x])
    return float(result.as_numpy("x")[0])


def test_an_override_that_turns_batching_on_moves_a_copied_model_to_the_host(
    start: Callable[..., ServerProcess], tmp_path: Path, processes: int
) -> None:
    """``simple`` plain and loaded at start (copied into each protocol process); the
    load with Triton's override makes it batch: it then runs once, in the model
    host, started for it. Unloaded and loaded again as on disk, it batches no more
    (and stays in the host: a load after the start runs there, one copy)."""
    repository = tmp_path / "models"
    add_custom_model(repository, "simple", "SlowEcho")
    server = start(repository, settings={"protocol_processes": processes})
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        assert batch_size_everywhere(server, "simple") == {0}
        client.load_model("simple", config=OVERRIDE)
        check_served_as_one(server, processes)
        pids = {pid_of(server) for _ in range(8)}
        assert len(pids) == 1  # one process runs it: the host (or the lone server)
        client.unload_model("simple")
        client.load_model("simple")
        assert batch_size_everywhere(server, "simple") == {0}
        assert all(ready_everywhere(server, "simple"))
    finally:
        client.close()


def pid_of(server: ServerProcess) -> int:
    """The pid of the process whose model answered, on a new connection."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        x = httpclient.InferInput("x", [1], "FP32")
        x.set_data_from_numpy(np.array([1.0], dtype=np.float32))
        return int(client.infer("simple", [x]).as_numpy("pid")[0])
    finally:
        client.close()


# Triton's example model as a Python-backend folder (its config.pbtxt batches 8).
SIMPLE_PBTXT = """max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_override_changes_a_triton_folders_config(
    start: Callable[..., ServerProcess], tmp_path: Path, processes: int, protocol: str
) -> None:
    """The examples' override ``{"max_batch_size":"16"}`` on a folder with a
    config.pbtxt: its configuration then says 16 in every process (it said the
    config.pbtxt's 8: the examples stopped there), and 8 again once loaded as on disk."""
    repository = tmp_path / "models"
    add_triton_model(repository, "simple", SIMPLE_PBTXT)
    server = start(repository, settings={"protocol_processes": processes})
    client: Any
    if protocol == "http":
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    else:
        client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        client.load_model("simple", config=OVERRIDE)
        config = client.get_model_config("simple")
        assert (
            config["max_batch_size"] if protocol == "http" else config.config.max_batch_size
        ) == 16
        assert batch_size_everywhere(server, "simple") == {16}
        client.unload_model("simple")
        client.load_model("simple")
        assert batch_size_everywhere(server, "simple") == {8}
    finally:
        client.close()
