"""The model repository, closed: the API turned off, and loads kept under the root.

``model_repository_api: false`` refuses index, load and unload over REST and gRPC
(403 / PERMISSION_DENIED) while the models loaded at start-up serve. A model
whose ``parameters.uri`` leaves ``model_repository_root`` is refused, whether its
path is absolute or climbs out with ``..``; artifacts linked from inside the root
(KServe's and ModelMesh's layout) load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from tests.support.models import add_custom_model
from tests.support.serverproc import ServerProcess

INFER = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [7]}]}


def test_the_repository_api_turned_off(start: Any, tmp_path: Path) -> None:
    add_custom_model(tmp_path, "echo", "Echo")
    server: ServerProcess = start(settings={"model_repository_api": False})
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for path in (
            "/v2/repository/index",
            "/v2/repository/models/echo/load",
            "/v2/repository/models/echo/unload",
        ):
            refused = http.post(path)
            assert refused.status_code == 403, path
            assert "model_repository_api: false" in refused.json()["error"]
        assert http.post("/v2/models/echo/infer", json=INFER).status_code == 200
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        for call, kwargs in (
            (client.get_model_repository_index, {}),
            (client.load_model, {"model_name": "echo"}),
            (client.unload_model, {"model_name": "echo"}),
        ):
            with pytest.raises(InferenceServerException) as refusal:
                call(**kwargs)
            assert refusal.value.status() == "StatusCode.PERMISSION_DENIED"
        assert client.is_model_ready("echo")


def add_artifact_model(root: Path, name: str, uri: str) -> None:
    """A model that serves the text of the file at ``uri``."""
    add_custom_model(root, name, "ServesArtifact", parameters={"uri": uri})


def test_loads_stay_under_the_repository_root(start: Any, tmp_path: Path) -> None:
    outside = tmp_path / "outside"  # another volume, say, where the artifacts are pulled
    outside.mkdir()
    (outside / "artifact.txt").write_text("pulled")
    root = tmp_path / "repository"
    # ModelMesh's layout: a folder in the root, the artifact a link to where it was pulled.
    add_artifact_model(root, "linked", "./artifact.txt")
    (root / "linked" / "artifact.txt").symlink_to(outside / "artifact.txt")
    server: ServerProcess = start(root)

    body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}]}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        answer = http.post("/v2/models/linked/infer", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == ["pulled"]

        add_artifact_model(root, "climbs", "../../outside/artifact.txt")
        add_artifact_model(root, "absolute", str(outside / "artifact.txt"))
        for name in ("climbs", "absolute"):
            refused = http.post(f"/v2/repository/models/{name}/load")
            assert refused.status_code == 400, refused.text
            message = refused.json()["error"]
            assert "outside the model repository" in message
            assert "model_repository_root" in message
            assert http.post(f"/v2/models/{name}/infer", json=body).status_code == 404
        listed = {entry["name"]: entry for entry in http.post("/v2/repository/index").json()}
        assert "outside the model repository" in listed["climbs"]["reason"]
        assert listed["linked"]["state"] == "READY"
    with (
        triton_grpc.InferenceServerClient(server.grpc_address) as client,
        pytest.raises(InferenceServerException) as refusal,
    ):
        client.load_model("absolute")
    assert refusal.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "outside the model repository" in refusal.value.message()
