"""The model repository extension: index, load (re-reading the folder) and unload.

These tests change the repository of a running server, so they share a server of
their own; each test works on models it adds itself.
"""

from __future__ import annotations

import json
import shutil
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

from tests.support.models import add_custom_model, write_model_folder
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from .across_processes import BOTH_WAYS

INPUT = {"name": "x", "datatype": "INT32", "shape": [1], "data": [7]}


@pytest.fixture(scope="module", params=BOTH_WAYS)
def repo_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """With two protocol processes too: a load or unload holds in every one."""
    repository = tmp_path_factory.mktemp("mutable-repository")
    add_custom_model(repository, "echo", "Echo")
    with start_server(repository, request.param) as process:
        yield process


@pytest.fixture(scope="module")
def client(repo_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=repo_server.url, timeout=60) as http:
        yield http


def index(client: httpx.Client, body: Any = None) -> list[dict[str, Any]]:
    response = client.post("/v2/repository/index", json=body)
    assert response.status_code == 200, response.text
    return list(response.json())


def entry(client: httpx.Client, name: str) -> list[dict[str, Any]]:
    return [item for item in index(client) if item["name"] == name]


def load(client: httpx.Client, name: str) -> httpx.Response:
    return client.post(f"/v2/repository/models/{name}/load")


def infer(client: httpx.Client, model: str, version: str = "") -> httpx.Response:
    path = f"/versions/{version}" if version else ""
    return client.post(f"/v2/models/{model}{path}/infer", json={"inputs": [INPUT]})


def output(response: httpx.Response, name: str) -> Any:
    assert response.status_code == 200, response.text
    return next(o["data"] for o in response.json()["outputs"] if o["name"] == name)


def write_settings(folder: Path, **changes: Any) -> None:
    path = folder / "model-settings.json"
    settings = json.loads(path.read_text())
    settings.update(changes)
    path.write_text(json.dumps(settings))


def test_index_entries_and_ready_filter(client: httpx.Client, repo_server: ServerProcess) -> None:
    add_custom_model(repo_server.repository, "idle", "Echo")  # on disk, never loaded
    echo = {"name": "echo", "version": "", "state": "READY", "reason": ""}
    everything = index(client)
    assert echo in everything
    (idle,) = [item for item in everything if item["name"] == "idle"]
    assert idle["state"] == "UNAVAILABLE"
    assert idle["reason"]
    assert client.post("/v2/repository/index").json() == everything, "the body is optional"
    assert index(client, {}) == everything
    ready = index(client, {"ready": True})
    assert echo in ready
    assert all(item["state"] == "READY" for item in ready)
    not_ready = index(client, {"ready": False})
    assert idle in not_ready
    assert all(item["state"] != "READY" for item in not_ready)


def test_a_new_model_folder_loads_without_restart(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    assert infer(client, "added").status_code == 404
    add_custom_model(repo_server.repository, "added", "Echo")
    response = load(client, "added")
    assert (response.status_code, response.json()) == (200, {})
    assert output(infer(client, "added"), "x") == [7]
    assert entry(client, "added") == [
        {"name": "added", "version": "", "state": "READY", "reason": ""}
    ]
    assert client.get("/v2/health/ready").status_code == 200


def test_unload_then_load_again(client: httpx.Client, repo_server: ServerProcess) -> None:
    add_custom_model(repo_server.repository, "toggled", "Echo")
    assert load(client, "toggled").status_code == 200
    response = client.post("/v2/repository/models/toggled/unload")
    assert (response.status_code, response.json()) == (200, {})
    after = infer(client, "toggled")
    assert (after.status_code, after.json()) == (
        404,
        {"error": "Request for unknown model: 'toggled' is not found"},
    )
    # Still in the repository: not ready, not unknown (as Triton answers).
    ready = client.get("/v2/models/toggled/ready")
    assert (ready.status_code, ready.json()) == (503, {"name": "toggled", "ready": False})
    assert [item["state"] for item in entry(client, "toggled")] == ["UNAVAILABLE"]
    assert load(client, "toggled").status_code == 200
    assert output(infer(client, "toggled"), "x") == [7]


def test_a_reload_serves_the_old_instance_until_the_new_one_is_ready(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    folder = add_custom_model(
        repo_server.repository, "gated", "GatedLoad", parameters={"extra": {"tag": "old"}}
    )
    (folder / "gate").touch()
    assert load(client, "gated").status_code == 200
    assert output(infer(client, "gated"), "tag") == ["old"]

    write_settings(folder, parameters={"extra": {"tag": "new", "gate": "gate-new"}})
    reload_answers: list[httpx.Response] = []
    load_url = f"{repo_server.url}/v2/repository/models/gated/load"
    # Its own connection: the test keeps using `client` while this load is in flight.
    reload = threading.Thread(
        target=lambda: reload_answers.append(httpx.post(load_url, timeout=60))
    )
    reload.start()
    try:
        wait_for(lambda: (folder / "loading-new").exists(), "the new instance to start loading")
        assert output(infer(client, "gated"), "tag") == ["old"]
        assert client.get("/v2/models/gated/ready").status_code == 200
        assert entry(client, "gated")[0]["state"] == "READY"
        assert not (folder / "unloaded-old").exists()
    finally:
        (folder / "gate-new").touch()
        reload.join(timeout=30)
    assert reload_answers[0].status_code == 200, reload_answers[0].text
    assert output(infer(client, "gated"), "tag") == ["new"]
    assert (folder / "unloaded-old").exists(), "the old instance is unloaded after the swap"


def test_a_reload_picks_up_changed_runtime_code(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    files = {"coded_runtime.py": answering_runtime("first")}
    folder = write_model_folder(
        repo_server.repository, "coded", "coded_runtime.Answer", files=files
    )

    def write_runtime(answer: str) -> None:
        (folder / "coded_runtime.py").write_text(answering_runtime(answer))

    assert load(client, "coded").status_code == 200
    assert output(infer(client, "coded"), "answer") == ["first"]
    write_runtime("second")
    assert load(client, "coded").status_code == 200
    assert output(infer(client, "coded"), "answer") == ["second"]


def answering_runtime(answer: str) -> str:
    return textwrap.dedent(
        f"""
        import numpy as np
        from inferd import InferenceResponse, Model, Tensor

        class Answer(Model):
            def predict(self, request):
                value = np.array([{answer!r}.encode()], dtype=object)
                return InferenceResponse(outputs=[Tensor("answer", value)])
        """
    )


def test_model_folders_with_same_named_runtime_modules_each_run_their_own(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    for name in ("left", "right"):
        files = {"answer_runtime.py": answering_runtime(name)}
        write_model_folder(repo_server.repository, name, "answer_runtime.Answer", files=files)
        assert load(client, name).status_code == 200
    assert output(infer(client, "left"), "answer") == ["left"]
    assert output(infer(client, "right"), "answer") == ["right"]


def test_versions_follow_the_folders_on_disk(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    repository = repo_server.repository
    add_custom_model(repository, "twice/v1", "AsyncDouble", parameters={"version": "1"})
    assert load(client, "twice").status_code == 200
    assert output(infer(client, "twice"), "version") == ["1"]

    add_custom_model(repository, "twice/v2", "AsyncDouble", parameters={"version": "2"})
    assert load(client, "twice").status_code == 200
    assert output(infer(client, "twice"), "version") == ["2"]
    assert output(infer(client, "twice", "1"), "version") == ["1"]
    versions = sorted((item["version"], item["state"]) for item in entry(client, "twice"))
    assert versions == [("1", "READY"), ("2", "READY")]

    shutil.rmtree(repository / "twice" / "v1")
    assert load(client, "twice").status_code == 200
    assert infer(client, "twice", "1").status_code == 404
    assert output(infer(client, "twice", "2"), "y") == [14]


def test_a_failed_reload_keeps_the_old_instance(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    folder = add_custom_model(repo_server.repository, "steady", "Echo")
    assert load(client, "steady").status_code == 200
    write_settings(folder, implementation="testmodels.FailsToLoad")
    failed = load(client, "steady")
    assert failed.status_code == 500
    assert "RuntimeError: cannot find the weights" in failed.json()["error"]
    assert output(infer(client, "steady"), "x") == [7]
    (steady,) = entry(client, "steady")
    assert steady["state"] == "READY"
    assert "cannot find the weights" in steady["reason"]

    write_settings(folder, implementation="testmodels.Echo")
    assert load(client, "steady").status_code == 200
    assert entry(client, "steady")[0]["reason"] == ""


def test_a_failed_reload_of_a_model_in_worker_processes_is_shown_as_on_one_process(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    """With ``workers`` the model runs in the model host when protocol processes serve:
    the index every process answers shows the failed reload's reason there too."""
    folder = add_custom_model(repo_server.repository, "steady-workers", "Echo", workers=1)
    assert load(client, "steady-workers").status_code == 200
    write_settings(folder, implementation="testmodels.FailsToLoad")
    failed = load(client, "steady-workers")
    assert failed.status_code == 500, failed.text
    assert "RuntimeError: cannot find the weights" in failed.json()["error"]
    for _ in range(6):  # on new connections: whichever process takes them
        with httpx.Client(base_url=repo_server.url, timeout=60) as fresh:
            assert output(infer(fresh, "steady-workers"), "x") == [7]
            (steady,) = entry(fresh, "steady-workers")
            assert steady["state"] == "READY"
            assert "cannot find the weights" in steady["reason"]

    write_settings(folder, implementation="testmodels.Echo")
    assert load(client, "steady-workers").status_code == 200
    for _ in range(6):
        with httpx.Client(base_url=repo_server.url, timeout=60) as fresh:
            assert entry(fresh, "steady-workers")[0]["reason"] == ""


def test_a_model_in_worker_processes_that_fails_its_first_load_is_unavailable_with_why(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    add_custom_model(repo_server.repository, "never-workers", "FailsToLoad", workers=1)
    failed = load(client, "never-workers")
    assert failed.status_code == 500, failed.text
    assert "cannot find the weights" in failed.json()["error"]
    for _ in range(6):
        with httpx.Client(base_url=repo_server.url, timeout=60) as fresh:
            (never,) = entry(fresh, "never-workers")
            assert never["state"] == "UNAVAILABLE"
            assert "cannot find the weights" in never["reason"]


def test_a_broken_settings_file_only_blocks_its_own_model(
    client: httpx.Client, repo_server: ServerProcess
) -> None:
    broken = repo_server.repository / "broken"
    broken.mkdir()
    (broken / "model-settings.json").write_text("{not json")
    try:
        response = load(client, "broken")
        assert response.status_code == 400
        assert str(broken / "model-settings.json") in response.json()["error"]
        (listed,) = entry(client, "broken")
        assert listed["state"] == "UNAVAILABLE"
        assert "model-settings.json" in listed["reason"]

        add_custom_model(repo_server.repository, "neighbour", "Echo")
        assert load(client, "neighbour").status_code == 200
        assert output(infer(client, "neighbour"), "x") == [7]
    finally:
        shutil.rmtree(broken)


def test_invalid_model_settings_are_a_400(client: httpx.Client, repo_server: ServerProcess) -> None:
    folder = add_custom_model(repo_server.repository, "misconfigured", "Echo")
    write_settings(folder, max_batch_size=-1)
    response = load(client, "misconfigured")
    assert response.status_code == 400
    assert "max_batch_size" in response.json()["error"]
    write_settings(folder, implementation="no_such_module.Model", max_batch_size=0)
    response = load(client, "misconfigured")
    assert response.status_code == 400
    assert "no_such_module" in response.json()["error"]


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (
            "load",  # worded as Triton's, which clients match ("failed to load")
            "failed to load 'nowhere', failed to poll from model repository: the model "
            "repository holds no model 'nowhere' (POST /v2/repository/index lists those "
            "it holds)",
        ),
        ("unload", "Request for unknown model: 'nowhere' is not found"),
    ],
)
def test_unknown_model_is_a_404(client: httpx.Client, action: str, error: str) -> None:
    response = client.post(f"/v2/repository/models/nowhere/{action}")
    assert (response.status_code, response.json()) == (404, {"error": error})


def test_tritonclient_repository_calls(repo_server: ServerProcess) -> None:
    add_custom_model(repo_server.repository, "via-triton", "Echo")
    client = triton.InferenceServerClient(f"127.0.0.1:{repo_server.http_port}")
    try:
        assert not client.is_model_ready("via-triton")
        client.load_model("via-triton")
        assert client.is_model_ready("via-triton")
        entries = client.get_model_repository_index()
        assert {"name": "via-triton", "version": "", "state": "READY", "reason": ""} in entries
        tensor = triton.InferInput("x", [2], "INT64")
        tensor.set_data_from_numpy(np.array([3, 4], dtype=np.int64))
        result = client.infer("via-triton", [tensor])
        np.testing.assert_array_equal(result.as_numpy("x"), [3, 4])
        client.unload_model("via-triton")
        assert not client.is_model_ready("via-triton")
    finally:
        client.close()
