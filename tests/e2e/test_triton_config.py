"""Triton's clients unchanged: model config, load overrides, wording, versions, logging.

Everything here goes through tritonclient's public API (http and grpc), as a
Triton user's code would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from tests.support.models import add_custom_model, write_model_folder
from tests.support.polling import wait_for
from tests.support.procstat import serving_processes
from tests.support.serverproc import ServerProcess, start_server

INPUTS = [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}]


@pytest.fixture(scope="module")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("triton-config")
    add_custom_model(repository, "plain", "Echo", inputs=INPUTS, outputs=INPUTS, platform="echo")
    add_custom_model(
        repository, "batched", "Echo", inputs=INPUTS, max_batch_size=4, max_batch_time=0.001
    )
    add_custom_model(repository, "tunable", "Echo", inputs=INPUTS)
    add_custom_model(repository, "unloadable", "Echo", inputs=INPUTS)
    add_custom_model(repository, "double/v1", "AsyncDouble", parameters={"version": "1"})
    add_custom_model(repository, "double/v2", "AsyncDouble", parameters={"version": "2"})
    with start_server(repository) as process:
        yield process


@pytest.fixture(scope="module")
def http_client(triton_server: ServerProcess) -> Iterator[triton_http.InferenceServerClient]:
    client = triton_http.InferenceServerClient(f"127.0.0.1:{triton_server.http_port}")
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc_client(triton_server: ServerProcess) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(triton_server.grpc_address) as client:
        yield client


def grpc_config(client: triton_grpc.InferenceServerClient, name: str) -> dict[str, Any]:
    return client.get_model_config(name, as_json=True)["config"]


def test_model_config_without_batching(
    http_client: triton_http.InferenceServerClient, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    config = http_client.get_model_config("plain")
    assert config["name"] == "plain" and config["platform"] == "echo"
    assert config["backend"] == "testmodels.Echo"
    assert config["max_batch_size"] == 0
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 3]}]
    assert config["instance_group"] == [{"name": "plain", "kind": "KIND_CPU", "count": 1}]
    assert "dynamic_batching" not in config
    over_grpc = grpc_config(grpc_client, "plain")
    assert over_grpc["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": ["-1", "3"]}]
    assert "max_batch_size" not in over_grpc  # proto3 JSON leaves out zeros
    assert over_grpc["instance_group"] == config["instance_group"]


def test_model_config_with_batching(
    http_client: triton_http.InferenceServerClient, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    config = http_client.get_model_config("batched")
    assert config["max_batch_size"] == 4
    assert config["input"][0]["dims"] == [3]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 1000
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
    over_grpc = grpc_config(grpc_client, "batched")
    assert over_grpc["max_batch_size"] == 4
    assert over_grpc["dynamic_batching"]["max_queue_delay_microseconds"] == "1000"
    versioned = http_client.get_model_config("double", model_version="2")
    assert versioned["name"] == "double"


def test_metadata_lists_the_loaded_versions(
    http_client: triton_http.InferenceServerClient, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    assert http_client.get_model_metadata("double")["versions"] == ["1", "2"]
    assert grpc_client.get_model_metadata("double").versions == ["1", "2"]
    assert http_client.get_model_metadata("plain")["versions"] == []  # unversioned


def unknown(name: str) -> str:
    return f"Request for unknown model: '{name}' is not found"


def test_unknown_models_are_worded_as_tritons_over_http(
    http_client: triton_http.InferenceServerClient, triton_server: ServerProcess
) -> None:
    inputs = [triton_http.InferInput("x", [1, 3], "FP32")]
    inputs[0].set_data_from_numpy(np.zeros((1, 3), np.float32))
    calls: list[Callable[[], Any]] = [
        lambda: http_client.infer("nope", inputs),
        lambda: http_client.get_model_metadata("nope"),
        lambda: http_client.get_model_config("nope"),
        lambda: http_client.get_inference_statistics("nope"),
    ]
    for call in calls:
        with pytest.raises(InferenceServerException) as raised:
            call()
        assert raised.value.message() == unknown("nope")
        assert raised.value.status() == "404"
    # is_model_ready answers a bool; the body says why.
    assert not http_client.is_model_ready("nope")
    ready = httpx.get(f"{triton_server.url}/v2/models/nope/ready", timeout=10)
    assert (ready.status_code, ready.json()["error"]) == (404, unknown("nope"))
    with pytest.raises(InferenceServerException) as raised:
        http_client.get_model_config("double", model_version="7")
    assert raised.value.message() == "Request for unknown model: 'double' version 7 is not found"


def test_unknown_models_are_worded_as_tritons_over_grpc(
    grpc_client: triton_grpc.InferenceServerClient,
) -> None:
    inputs = [triton_grpc.InferInput("x", [1, 3], "FP32")]
    inputs[0].set_data_from_numpy(np.zeros((1, 3), np.float32))
    calls: list[Callable[[], Any]] = [
        lambda: grpc_client.infer("nope", inputs),
        lambda: grpc_client.get_model_metadata("nope"),
        lambda: grpc_client.is_model_ready("nope"),
        lambda: grpc_client.get_model_config("nope"),
        lambda: grpc_client.get_inference_statistics("nope"),
    ]
    for call in calls:
        with pytest.raises(InferenceServerException) as raised:
            call()
        assert raised.value.message() == unknown("nope")
        assert raised.value.status() == "StatusCode.NOT_FOUND"


def echoes(client: Any, module: Any, name: str) -> bool:
    data = np.arange(3, dtype=np.float32).reshape(1, 3)
    inputs = [module.InferInput("x", [1, 3], "FP32")]
    inputs[0].set_data_from_numpy(data)
    return bool(np.array_equal(client.infer(name, inputs).as_numpy("x"), data))


def test_a_load_with_a_config_override_serves_with_it(
    http_client: triton_http.InferenceServerClient, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    override = {
        "max_batch_size": 8,
        "dynamic_batching": {"max_queue_delay_microseconds": 2500},
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
    }
    http_client.load_model("tunable", config=json.dumps(override))
    config = http_client.get_model_config("tunable")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [3]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 2500
    assert echoes(http_client, triton_http, "tunable")
    grpc_client.load_model("tunable", config=json.dumps({"max_batch_size": 2}))
    assert grpc_config(grpc_client, "tunable")["max_batch_size"] == 2
    # A load without a config reads model-settings.json again, as Triton's does.
    http_client.load_model("tunable")
    assert http_client.get_model_config("tunable")["max_batch_size"] == 0


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ("{not json", "the config parameter is not valid JSON"),
        ('{"max_batch_size": 4, "colour": "red"}', "unknown config key 'colour'"),
        ('{"implementation": "os.system"}', "may not set 'implementation'"),
        ('{"parameters": {"uri": "/etc/passwd"}}', "may not set 'parameters'"),
    ],
)
def test_a_refused_override_fails_to_load_and_the_model_keeps_serving(
    http_client: triton_http.InferenceServerClient,
    grpc_client: triton_grpc.InferenceServerClient,
    config: str,
    why: str,
) -> None:
    for client, module, status in (
        (http_client, triton_http, "400"),
        (grpc_client, triton_grpc, "StatusCode.INVALID_ARGUMENT"),
    ):
        with pytest.raises(InferenceServerException) as raised:
            client.load_model("plain", config=config)
        assert raised.value.message().startswith("failed to load 'plain': ")
        assert why in raised.value.message() and raised.value.status() == status
        assert client.is_model_ready("plain") and echoes(client, module, "plain")
        assert client.get_model_config("plain") is not None


def test_files_in_a_load_are_refused(http_client: triton_http.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as raised:
        http_client.load_model("plain", config="{}", files={"file:1/model.py": b"import os"})
    assert "file parameters (file:1/model.py) are refused" in raised.value.message()
    assert raised.value.status() == "400"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_model_control_example_unloads_then_is_refused_a_long_file_path(
    http_client: triton_http.InferenceServerClient,
    grpc_client: triton_grpc.InferenceServerClient,
    triton_server: ServerProcess,
    protocol: str,
) -> None:
    """simple_grpc_model_control.py's steps: a model of the repository unloaded is
    not ready (not unknown); a load whose file path has a component longer than
    NAME_MAX is refused as an invalid argument, writes nothing and loads nothing."""
    client: Any = http_client if protocol == "http" else grpc_client
    status = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    folder = triton_server.repository / "unloadable"
    before = sorted(path.name for path in folder.rglob("*"))
    client.load_model("unloadable")
    assert client.is_model_ready("unloadable")
    client.unload_model("unloadable")
    assert client.is_model_ready("unloadable") is False
    with pytest.raises(InferenceServerException) as raised:
        client.load_model("unloadable", config="{}", files={"file:" + "A" * 256: b"a"})
    message = raised.value.message()
    assert raised.value.status() == status
    failed = "failed to load 'unloadable', failed to poll from model repository: "
    assert message.startswith(failed + "Invalid file path 'file:AAA")
    assert "256 bytes long, over the 255 bytes a file name may have (NAME_MAX)" in message
    assert len(message) < 500  # the 261-character name is not repeated whole
    assert client.is_server_live() and client.is_model_ready("unloadable") is False
    assert sorted(path.name for path in folder.rglob("*")) == before
    assert echoes(client, triton_http if protocol == "http" else triton_grpc, "plain")


def test_an_unloaded_model_answers_not_ready_and_an_unknown_one_not_found(
    grpc_client: triton_grpc.InferenceServerClient, triton_server: ServerProcess
) -> None:
    """The ready route: 503 with ``ready: false`` for a model of the repository that
    is not loaded (as for one loading), 404 for a name the repository does not hold;
    ModelReady over gRPC answers ``ready: false`` for the first only."""
    grpc_client.load_model("unloadable")
    grpc_client.unload_model("unloadable")
    try:
        ready = httpx.get(f"{triton_server.url}/v2/models/unloadable/ready", timeout=10)
        assert (ready.status_code, ready.json()) == (503, {"name": "unloadable", "ready": False})
        assert grpc_client.is_model_ready("unloadable") is False
        for name, version in (("nope", ""), ("unloadable", "3")):
            url = f"{triton_server.url}/v2/models/{name}{'/versions/' + version if version else ''}"
            assert httpx.get(f"{url}/ready", timeout=10).status_code == 404
            with pytest.raises(InferenceServerException) as raised:
                grpc_client.is_model_ready(name, version)
            assert raised.value.status() == "StatusCode.NOT_FOUND"
    finally:
        grpc_client.load_model("unloadable")
    assert grpc_client.is_model_ready("unloadable")


def test_a_very_long_name_in_an_error_still_answers_over_grpc(
    grpc_client: triton_grpc.InferenceServerClient,
) -> None:
    """An error that repeats what the client sent is cut to fit gRPC's headers: the
    client gets the status it should, not RESOURCE_EXHAUSTED for an oversized header."""
    name = "n" * 20_000
    with pytest.raises(InferenceServerException) as raised:
        grpc_client.get_model_metadata(name)
    assert raised.value.status() == "StatusCode.NOT_FOUND"
    assert raised.value.message().startswith("Request for unknown model: 'nnn")
    cut = f"... (cut; the message has {len(unknown(name))} characters)"
    assert raised.value.message().endswith(cut) and len(raised.value.message()) <= 2048
    with pytest.raises(InferenceServerException) as raised:
        grpc_client.load_model("plain", config="{}", files={"file:" + "B" * 20_000: b"b"})
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "Invalid file path" in raised.value.message()


def test_log_settings_over_both_protocols(
    http_client: triton_http.InferenceServerClient,
    grpc_client: triton_grpc.InferenceServerClient,
    triton_server: ServerProcess,
) -> None:
    settings = http_client.get_log_settings()
    assert settings == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }
    changed = http_client.update_log_settings({"log_verbose_level": 1})
    assert changed["log_verbose_level"] == 1
    # Verbose logs the requests (a DEBUG line each) from now on.
    inputs = [triton_http.InferInput("x", [1, 3], "FP32")]
    inputs[0].set_data_from_numpy(np.zeros((1, 3), np.float32))
    http_client.infer("plain", inputs, request_id="logged-at-verbose")
    wait_for(lambda: "(id logged-at-verbose)" in triton_server.log(), "the request's log line")
    assert grpc_client.get_log_settings(as_json=True)["settings"]["log_verbose_level"] == {
        "uint32_param": 1
    }
    answer = grpc_client.update_log_settings({"log_verbose_level": 0, "log_info": False})
    assert answer.settings["log_info"].bool_param is False
    assert http_client.get_log_settings()["log_warning"] is True
    with pytest.raises(InferenceServerException) as raised:
        http_client.update_log_settings({"log_file": "/tmp/elsewhere.log"})
    assert raised.value.status() == "400" and "log_file" in raised.value.message()
    http_client.update_log_settings({"log_info": True})
    assert http_client.get_log_settings() == settings


# ---- warmup: READY only once every worker holding the model ran it ----

WARMUP_RUNTIME = '''
import os
import time
from pathlib import Path

from inferd import InferenceResponse, Model


class Records(Model):
    """Writes "<pid> <request id>" for each call; warmups take a while."""

    def predict(self, request):
        if request.id and request.id.startswith("warmup"):
            if "fail" in [tensor.name for tensor in request.inputs]:
                raise ValueError("the warmup input says fail")
            time.sleep(0.2)
        with Path(self.settings.extra["record"]).open("a") as record:
            record.write(f"{os.getpid()} {request.id}\\n")
        return InferenceResponse(outputs=request.inputs)
'''


def add_recording_model(repository: Path, name: str, record: Path, **settings: Any) -> None:
    parameters = {"extra": {"record": str(record)}}
    files = {"records.py": WARMUP_RUNTIME}
    write_model_folder(
        repository, name, "records.Records", files=files, parameters=parameters, **settings
    )


WARMUP = {
    "name": "zeros",
    "count": 2,
    "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [3], "zero_data": True}},
}


@pytest.mark.parametrize("workers", [0, 2])
def test_warmup_runs_in_every_worker_before_the_model_is_ready(
    start: Callable[..., ServerProcess], tmp_path: Path, workers: int
) -> None:
    repository = tmp_path / "repository"
    record = tmp_path / "record.txt"
    add_recording_model(repository, "warm", record, model_warmup=[WARMUP])
    server = start(repository, settings={"parallel_workers": workers})  # waits for ready
    lines = [line.split() for line in record.read_text().splitlines()]
    holders = max(workers, 1)
    # Without workers the model is copied into each protocol process: each copy warms up.
    copies = len(serving_processes(server.process.pid)) if workers == 0 else 1
    assert len(lines) == 2 * holders * copies
    assert {request for _, request in lines} == {"warmup-zeros"}
    assert len({pid for pid, _ in lines}) == holders * copies
    with triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
        config = client.get_model_config("warm")
        assert config["model_warmup"][0]["count"] == 2
        assert config["instance_group"][0]["count"] == holders
        # A warmup that fails fails the load, with its message.
        failing = {"name": "boom", "inputs": {"fail": {"data_type": "BOOL", "zero_data": True}}}
        with pytest.raises(InferenceServerException) as raised:
            client.load_model("warm", config=json.dumps({"model_warmup": [failing]}))
        message = raised.value.message()
        assert message.startswith("failed to load 'warm': Warmup 'boom' of model 'warm' failed")
        assert "the warmup input says fail" in message
        assert client.is_model_ready("warm")  # the instance already loaded keeps serving
