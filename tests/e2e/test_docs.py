"""OpenAPI documents and Swagger UI, served by a real server and read by real tools."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openapi_spec_validator import validate

from .conftest import add_custom_model, add_sklearn_model
from .serverproc import ServerProcess, start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
    "--virtual-time-budget=8000",
]
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
DECLARED_INPUT = {"name": "x", "datatype": "FP32", "shape": [-1, 3]}


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("docs")
    add_sklearn_model(repository)
    add_custom_model(repository, "echo", "Echo", inputs=[DECLARED_INPUT])
    server = start_server(repository)
    yield server
    server.stop()


def get_json(server: ServerProcess, path: str) -> dict:
    response = httpx.get(server.url + path)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_dataplane_document_is_valid_openapi(docs_server: ServerProcess) -> None:
    spec = get_json(docs_server, "/v2/docs/dataplane.json")
    validate(spec)
    for path in ("/v2/health/live", "/v2/models/{name}/infer", "/v2/repository/index"):
        assert path in spec["paths"]


MODEL_DOCS = "/v2/models/echo/docs/dataplane.json"
VERSION_DOCS = "/v2/models/echo/versions/1/docs/dataplane.json"


@pytest.mark.parametrize("path", [MODEL_DOCS, VERSION_DOCS])
def test_a_model_document_names_the_model_and_shows_its_inputs(
    docs_server: ServerProcess, path: str
) -> None:
    response = httpx.get(docs_server.url + path)
    if "/versions/" in path:
        # echo has no version "1": the per-version docs answer like the model routes.
        assert response.status_code == 404
        return
    spec = response.json()
    validate(spec)
    assert any("/v2/models/echo/" in route for route in spec["paths"])
    assert "x" in json.dumps(spec)  # the declared input appears in the example request


def test_swagger_ui_and_its_assets_are_served_locally(docs_server: ServerProcess) -> None:
    page = httpx.get(docs_server.url + "/v2/docs")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert "swagger-ui-bundle.js" in page.text
    asset = httpx.get(docs_server.url + "/v2/docs/static/swagger-ui-bundle.js")
    assert asset.status_code == 200
    assert len(asset.content) > 100_000
    assert httpx.get(docs_server.url + "/v2/models/echo/docs").status_code == 200


def test_an_unknown_model_has_no_docs(docs_server: ServerProcess) -> None:
    response = httpx.get(docs_server.url + "/v2/models/nope/docs/dataplane.json")
    assert response.status_code == 404
    assert "nope" in response.json()["error"]


def test_schemathesis_finds_no_server_error_or_spec_violation(
    docs_server: ServerProcess,
) -> None:
    schemathesis = Path(sys.executable).with_name("schemathesis")
    checks = "not_a_server_error,response_schema_conformance,content_type_conformance"
    command = [
        str(schemathesis),
        "run",
        f"{docs_server.url}/v2/docs/dataplane.json",
        "--checks",
        checks,
        "--max-examples",
        "15",
        "--phases",
        "examples,fuzzing",
        # Unloading would take the models away from the rest of the run.
        "--exclude-path-regex",
        "/unload$",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " failed" not in done.stdout.split("SUMMARY")[-1]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_swagger_ui_renders_every_operation_in_a_browser(
    docs_server: ServerProcess, tmp_path: Path
) -> None:
    assert CHROMIUM is not None
    url = docs_server.url + "/v2/docs"
    profile = f"--user-data-dir={tmp_path / 'profile'}"
    dom = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, profile, "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    spec = get_json(docs_server, "/v2/docs/dataplane.json")
    operations = sum(method in HTTP_METHODS for item in spec["paths"].values() for method in item)
    assert dom.count('class="opblock opblock-') == operations
    for path in spec["paths"]:
        assert f'data-path="{path}"' in dom
    screenshot = tmp_path / "docs.png"
    subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, profile, f"--screenshot={screenshot}", url],
        capture_output=True,
        timeout=120,
    )
    image = screenshot.read_bytes()
    assert image.startswith(b"\x89PNG")
    assert len(image) > 50_000  # a blank page compresses to a few kilobytes
