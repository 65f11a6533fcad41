"""supervisor/loading.py: what the REST port answers while the fork parent loads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from inferd.settings import ServerSettings
from inferd.supervisor.loading import loading_app
from tests.support.models import add_custom_model, write_model_folder

SKLEARN = "mlserver_sklearn.SKLearnModel"


def _ask(
    path: str, method: str = "GET", body: bytes = b"", settings: ServerSettings | None = None
) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    asyncio.run(loading_app(settings or ServerSettings())(scope, receive, send))
    return sent[0]["status"], sent[1]["body"]


def test_the_probes_are_answered_as_a_loading_lone_server_and_everything_else_says_loading() -> (
    None
):
    assert _ask("/v2/health/live") == (200, b'{"live": true}')
    assert _ask("/v2/health/ready") == (503, b'{"ready": false}')
    assert _ask("/v2/models/iris/versions/2/ready") == (503, b'{"name": "iris", "ready": false}')
    status, body = _ask("/v2/models/iris/infer")
    assert status == 503 and "loading its models" in json.loads(body)["error"]


def _repository(root: Path) -> Path:
    write_model_folder(root, "iris", SKLEARN)
    write_model_folder(root, "forest", SKLEARN, parameters={"version": "2"})
    return root


def test_the_repository_index_lists_the_models_loading_at_the_start(tmp_path: Path) -> None:
    settings = ServerSettings(model_repository_root=str(_repository(tmp_path)))
    status, body = _ask("/v2/repository/index", "POST", b"{}", settings)
    assert status == 200
    assert json.loads(body) == [
        {"name": "forest", "version": "2", "state": "LOADING", "reason": ""},
        {"name": "iris", "version": "", "state": "LOADING", "reason": ""},
    ]
    _, only_ready = _ask("/v2/repository/index", "POST", b'{"ready": true}', settings)
    assert json.loads(only_ready) == []
    status, bad = _ask("/v2/repository/index", "POST", b'{"ready": "x"', settings)
    assert status == 400 and "repository index request" in json.loads(bad)["error"]


def test_models_not_loaded_at_the_start_are_unavailable_in_the_index(tmp_path: Path) -> None:
    root = str(_repository(tmp_path))
    settings = ServerSettings(model_repository_root=root, load_models_at_startup=False)
    _, body = _ask("/v2/repository/index", "POST", b"", settings)
    assert [(entry["name"], entry["state"]) for entry in json.loads(body)] == [
        ("forest", "UNAVAILABLE"),
        ("iris", "UNAVAILABLE"),
    ]


def test_the_repository_index_lists_the_models_on_disk_as_loading(tmp_path: Path) -> None:
    add_custom_model(tmp_path, "echo", "Echo")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model-settings.json").write_text("{not json")
    settings = ServerSettings(model_repository_root=str(tmp_path))
    status, body = _ask("/v2/repository/index", "POST", b"{}", settings)
    assert status == 200
    (broken, echo) = json.loads(body)
    assert echo == {"name": "echo", "version": "", "state": "LOADING", "reason": ""}
    assert broken["state"] == "UNAVAILABLE" and "model-settings.json" in broken["reason"]
    assert _ask("/v2/repository/index", "POST", b'{"ready": true}', settings) == (200, b"[]")
    status, body = _ask("/v2/repository/index", "POST", b'{"ready": 3}', settings)
    assert status == 400, body
