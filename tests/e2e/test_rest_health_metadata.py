"""REST health and metadata: /v2/health/*, /v2/models/{m}/ready, GET /v2, GET /v2/models/{m}."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferd import __version__
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess

from .across_processes import BOTH_WAYS
from .conftest import TYPED_METADATA


def get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=10)


def index(server: ServerProcess) -> dict[str, dict[str, Any]]:
    entries = httpx.post(server.url + "/v2/repository/index", timeout=10).json()
    return {entry["name"]: entry for entry in entries}


def test_live_and_ready(rest: httpx.Client) -> None:
    live = rest.get("/v2/health/live")
    assert (live.status_code, live.json()) == (200, {"live": True})
    assert live.headers["content-type"] == "application/json"
    ready = rest.get("/v2/health/ready")
    assert (ready.status_code, ready.json()) == (200, {"ready": True})


@pytest.mark.parametrize(
    "path, name",
    [
        ("/v2/models/iris/ready", "iris"),
        ("/v2/models/double/ready", "double"),
        ("/v2/models/double/versions/1/ready", "double"),
        ("/v2/models/double/versions/2/ready", "double"),
    ],
)
def test_model_ready(rest: httpx.Client, path: str, name: str) -> None:
    response = rest.get(path)
    assert (response.status_code, response.json()) == (200, {"name": name, "ready": True})


@pytest.mark.parametrize(
    "path, message",
    [
        ("/v2/models/nope/ready", "Request for unknown model: 'nope' is not found"),
        (
            "/v2/models/double/versions/3/ready",
            "Request for unknown model: 'double' version 3 is not found",
        ),
        ("/v2/models/nope", "Request for unknown model: 'nope' is not found"),
        (
            "/v2/models/double/versions/3",
            "Request for unknown model: 'double' version 3 is not found",
        ),
    ],
)
def test_unknown_model_or_version_is_404(rest: httpx.Client, path: str, message: str) -> None:
    response = rest.get(path)
    assert (response.status_code, response.json()) == (404, {"error": message})


def test_server_metadata_lists_the_implemented_extensions(rest: httpx.Client) -> None:
    response = rest.get("/v2")
    assert response.status_code == 200
    assert response.json() == {
        "name": "inferd",
        "version": __version__,
        "extensions": [
            "classification",
            "sequence",
            "model_repository",
            "model_repository(unload_dependents)",
            "schedule_policy",
            "model_configuration",
            "binary_tensor_data",
            "parameters",
            "statistics",
            "trace",
            "logging",
            "generate",
        ],
    }


def test_model_metadata_reports_declared_settings(rest: httpx.Client) -> None:
    response = rest.get("/v2/models/typed")
    assert response.status_code == 200
    assert response.json() == {"name": "typed", **TYPED_METADATA}


@pytest.mark.parametrize("version", ["1", "2"])
def test_model_metadata_under_a_version(rest: httpx.Client, version: str) -> None:
    response = rest.get(f"/v2/models/double/versions/{version}")
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "double"
    assert {"versions", "platform", "inputs", "outputs"} <= set(body)


def test_model_metadata_from_the_runtime(rest: httpx.Client) -> None:
    body = rest.get("/v2/models/iris").json()
    assert body["name"] == "iris"
    for tensor in body["inputs"] + body["outputs"]:
        assert set(tensor) >= {"name", "datatype", "shape"}
    assert body["inputs"][0]["datatype"] == "FP64"
    assert body["inputs"][0]["shape"][-1] == 4


@pytest.mark.parametrize("settings", BOTH_WAYS)
def test_not_ready_until_startup_models_have_loaded(
    start: Callable[..., ServerProcess], tmp_path: Path, settings: dict[str, Any]
) -> None:
    """Live, not ready, while the start-up models load: with several protocol processes
    too, which open the ports at the server's start before their models load (a
    liveness probe must not restart a server whose load is long)."""
    repository = tmp_path / "repository"
    folder = add_custom_model(repository, "slow", "GatedLoad", parameters={"extra": {"tag": "a"}})
    server = start(repository, settings=settings, wait="/v2/health/live")
    wait_for(lambda: (folder / "loading-a").exists(), "the model to start loading")

    ready = get(server.url + "/v2/health/ready")
    assert (ready.status_code, ready.json()) == (503, {"ready": False})
    model_ready = get(server.url + "/v2/models/slow/ready")
    assert (model_ready.status_code, model_ready.json()) == (503, {"name": "slow", "ready": False})
    # With forked protocol processes, which exist once their parent has loaded, the
    # supervisor answers the REST port meanwhile: the probes and the index as above.
    assert index(server)["slow"]["state"] == "LOADING"
    assert get(server.url + "/v2/health/live").status_code == 200

    (folder / "gate").touch()
    server.wait_until("/v2/health/ready", timeout=30)
    model_ready = get(server.url + "/v2/models/slow/ready")
    assert (model_ready.status_code, model_ready.json()) == (200, {"name": "slow", "ready": True})


def test_a_model_that_fails_to_load_makes_the_server_unready(
    start: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    repository = tmp_path / "repository"
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "broken", "FailsToLoad")
    server = start(repository, wait="/v2/health/live")

    def both_tried() -> bool:
        entries = index(server)
        return entries["echo"]["state"] == "READY" and "weights" in entries["broken"]["reason"]

    wait_for(both_tried, "both models to be tried")

    ready = get(server.url + "/v2/health/ready")
    assert (ready.status_code, ready.json()) == (503, {"ready": False})
    live = get(server.url + "/v2/health/live")
    assert (live.status_code, live.json()) == (200, {"live": True})
    broken = get(server.url + "/v2/models/broken/ready")
    assert (broken.status_code, broken.json()) == (503, {"name": "broken", "ready": False})
    # With protocol processes, the one that answered the index may be ahead of another
    # (or of the supervisor's loading answers) for a moment: a probe polls.
    wait_for(lambda: get(server.url + "/v2/models/echo/ready").status_code == 200, "echo ready")
    assert "RuntimeError: cannot find the weights" in index(server)["broken"]["reason"]

    infer = httpx.post(server.url + "/v2/models/broken/infer", json={"inputs": []})
    assert infer.status_code == 503
    assert "cannot find the weights" in infer.json()["error"]
    assert get(server.url + "/v2/models/broken").status_code == 503
    wait_for(lambda: "not ready: 1 model version(s) failed" in server.log(), "the start-up log")
    assert "inferd is ready" not in server.log()

    failure_lines = [line for line in server.log().splitlines() if "ERROR" in line]
    assert any("'broken'" in line and "cannot find the weights" in line for line in failure_lines)
