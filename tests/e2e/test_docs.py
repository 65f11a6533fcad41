"""OpenAPI documents and Swagger UI: /v2/docs, /v2/models/{m}[/versions/{v}]/docs.

The documents must validate, cover every REST route, build each model's example
request from its declared inputs, and hold for what the server really answers:
schemathesis fuzzes every documented operation and fails on a 5xx or an answer
the document does not allow. The browser side is in test_docs_browser.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from tests.support.models import add_custom_model, add_sklearn_model
from tests.support.serverproc import ServerProcess, start_server

# What the `echo` model of the docs repository declares in its model-settings.json.
ECHO_INPUTS = [
    {"name": "features", "datatype": "FP32", "shape": [-1, 3]},
    {"name": "text", "datatype": "BYTES", "shape": [-1], "parameters": {"content_type": "str"}},
    {"name": "mask", "datatype": "BOOL", "shape": [2]},
]
ASSETS = ("swagger-ui.css", "swagger-ui-bundle.js", "favicon-32x32.png")


def build_docs_repository(repository: Path) -> Path:
    """iris (scikit-learn, version "1") and echo (custom, with declared inputs)."""
    add_sklearn_model(repository, "iris", parameters={"version": "1"})
    add_custom_model(repository, "echo", "Echo", inputs=ECHO_INPUTS, outputs=ECHO_INPUTS)
    return repository


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(build_docs_repository(tmp_path_factory.mktemp("docs")))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(docs_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=docs_server.url, timeout=30) as http:
        yield http


def operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method != "parameters"
    }


def test_dataplane_document_is_valid_openapi(client: httpx.Client) -> None:
    response = client.get("/v2/docs/dataplane.json")
    assert response.status_code == 200
    document = response.json()
    validate(document)
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    # Generated from the request Structs the server decodes with (server/rest/codec.py).
    assert schemas["InferenceRequest"]["required"] == ["inputs"]
    assert schemas["RequestInput"]["required"] == ["name", "shape", "datatype"]
    assert "FP32" in schemas["RequestInput"]["properties"]["datatype"]["enum"]


def test_every_rest_route_is_documented(client: httpx.Client) -> None:
    """The document's operations are exactly the server's routes (read from the app)."""
    code = (
        "import json\n"
        "from inferd.server.rest.api import build_rest_app\n"
        "from inferd.settings import ServerSettings\n"
        "app = build_rest_app(None, ServerSettings()).app\n"
        "print(json.dumps([[m, r.path] for r in app.routes for m in sorted(r.methods - {'HEAD'})]))"
    )
    listed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    routes = {(method, path) for method, path in json.loads(listed.stdout)}
    assert operations(client.get("/v2/docs/dataplane.json").json()) == routes


def test_errors_are_documented_with_the_error_schema(client: httpx.Client) -> None:
    document = client.get("/v2/docs/dataplane.json").json()
    infer = document["paths"]["/v2/models/{name}/infer"]["post"]
    assert set(infer["responses"]) == {"200", "400", "404", "413", "500", "503"}
    error = {"$ref": "#/components/schemas/Error"}
    for status in ("400", "404", "413", "500", "503"):
        assert infer["responses"][status]["content"]["application/json"]["schema"] == error
    binary = infer["requestBody"]["content"]["application/octet-stream"]
    assert binary["schema"]["format"] == "binary"


@pytest.mark.parametrize(
    "prefix, version",
    [
        ("/v2/models/echo", "default"),
        ("/v2/models/iris/versions/1", "1"),
        ("/v2/models/iris", "default"),
    ],
)
def test_model_document_has_the_model_in_its_paths(
    client: httpx.Client, prefix: str, version: str
) -> None:
    response = client.get(f"{prefix}/docs/dataplane.json")
    assert response.status_code == 200
    document = response.json()
    validate(document)
    assert document["info"]["version"] == version
    assert operations(document) == {
        ("GET", prefix),
        ("GET", f"{prefix}/ready"),
        ("POST", f"{prefix}/infer"),
    }


def example_of(document: dict[str, Any], infer_path: str) -> dict[str, Any]:
    body = document["paths"][infer_path]["post"]["requestBody"]["content"]["application/json"]
    example: dict[str, Any] = body["example"]
    return example


def test_model_example_is_built_from_declared_inputs_and_runs(client: httpx.Client) -> None:
    document = client.get("/v2/models/echo/docs/dataplane.json").json()
    example = example_of(document, "/v2/models/echo/infer")
    assert example == {
        "inputs": [
            {"name": "features", "shape": [1, 3], "datatype": "FP32", "data": [0.0] * 3},
            {
                "name": "text",
                "shape": [1],
                "datatype": "BYTES",
                "data": ["text"],
                "parameters": {"content_type": "str"},
            },
            {"name": "mask", "shape": [2], "datatype": "BOOL", "data": [False, False]},
        ]
    }
    assert "| features | FP32 | [-1, 3] |" in document["info"]["description"]
    answer = client.post("/v2/models/echo/infer", json=example)
    assert answer.status_code == 200, answer.text
    assert [output["name"] for output in answer.json()["outputs"]] == ["features", "text", "mask"]


def test_model_without_declared_inputs_gets_a_working_generic_example(
    client: httpx.Client,
) -> None:
    document = client.get("/v2/models/iris/versions/1/docs/dataplane.json").json()
    example = example_of(document, "/v2/models/iris/versions/1/infer")
    answer = client.post("/v2/models/iris/versions/1/infer", json=example)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "page, spec",
    [
        ("/v2/docs", "/v2/docs/dataplane.json"),
        ("/v2/models/echo/docs", "/v2/models/echo/docs/dataplane.json"),
        ("/v2/models/iris/versions/1/docs", "/v2/models/iris/versions/1/docs/dataplane.json"),
    ],
)
def test_swagger_pages_use_only_local_files(client: httpx.Client, page: str, spec: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert f'url: "{spec}"' in response.text
    # Nothing is fetched from another host: the docs work offline.
    assert not re.search(r"(src|href)=\"(https?:)?//", response.text)
    linked = re.findall(r"(?:src|href)=\"([^\"]+)\"", response.text)
    assert sorted(linked) == sorted(f"/v2/docs/static/{name}" for name in ASSETS)


@pytest.mark.parametrize(
    "name, content_type, start",
    [
        ("swagger-ui-bundle.js", "text/javascript; charset=utf-8", b""),
        ("swagger-ui.css", "text/css; charset=utf-8", b""),
        ("favicon-32x32.png", "image/png", b"\x89PNG"),
    ],
)
def test_swagger_ui_files_are_served(
    client: httpx.Client, name: str, content_type: str, start: bytes
) -> None:
    response = client.get(f"/v2/docs/static/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    assert response.content.startswith(start) and len(response.content) > 500


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("/v2/docs/static/..%2Fcore.py", 404, "No route for GET /v2/docs/static/../core.py"),
        ("/v2/docs/static/LICENSE", 404, "No Swagger UI file 'LICENSE'"),
        ("/v2/docs/static/swagger-editor.js", 404, "No Swagger UI file"),
        ("/v2/models/nope/docs", 404, "Request for unknown model: 'nope' is not found"),
        (
            "/v2/models/nope/docs/dataplane.json",
            404,
            "Request for unknown model: 'nope' is not found",
        ),
        (
            "/v2/models/iris/versions/9/docs",
            404,
            "Request for unknown model: 'iris' version 9 is not found",
        ),
    ],
)
def test_docs_errors(client: httpx.Client, path: str, status: int, message: str) -> None:
    response = client.get(path)
    assert response.status_code == status
    assert message in response.json()["error"]


def test_swagger_files_are_read_without_importing_web_frameworks() -> None:
    code = (
        "import sys\n"
        "from inferd.server.docs.pages import SwaggerAssets\n"
        "assert SwaggerAssets().read('swagger-ui-bundle.js')\n"
        "print(sorted(m for m in ('swagger_ui', 'jinja2', 'yaml', 'flask', 'tornado', 'sanic',"
        " 'falcon', 'aiohttp', 'quart', 'bottle', 'chalice') if m in sys.modules))"
    )
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "[]"


def test_root_path_prefixes_the_links(start: Any, tmp_path: Path) -> None:
    """Behind a proxy that strips /inferd, the page and document point through it."""
    server = start(
        build_docs_repository(tmp_path / "repository"), settings={"root_path": "/inferd"}
    )
    page = httpx.get(server.url + "/v2/models/echo/docs", timeout=10).text
    assert 'url: "/inferd/v2/models/echo/docs/dataplane.json"' in page
    assert 'src="/inferd/v2/docs/static/swagger-ui-bundle.js"' in page
    document = httpx.get(server.url + "/v2/docs/dataplane.json", timeout=10).json()
    assert document["servers"] == [{"url": "/inferd"}]


# ---- schemathesis: every documented operation, fuzzed against the real server ----

# The server must answer nothing the document does not allow, reject what it
# forbids with a 4xx, and never fail with a 5xx (the example models do not fail).
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_headers_conformance,response_schema_conformance,negative_data_rejection,"
    "unsupported_method"
)


# The checks go in a config file, not --checks: a check named on the command line
# would override the ready routes' exception. A model's ready route answers 503 with
# {"ready": false}, as documented, for a model that is not ready (loading, or unloaded
# by the fuzzer): that is its answer, not a server error.
CONFIG = (
    "[checks]\nenabled = false\n"
    + "".join(f"{name}.enabled = true\n" for name in CHECKS.split(","))
    + (
        "[[operations]]\n"
        'include-path-regex = "/v2/models/.*/ready$"\n'
        "checks.not_a_server_error.enabled = false\n"
    )
)


def fuzz(document_url: str, config: Path, max_examples: int = 25) -> None:
    """Run the schemathesis CLI (its pytest plugin does not support pytest 9 yet)."""
    config.write_text(CONFIG)
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        f"--config-file={config}",
        "run",
        document_url,
        "--phases=examples,coverage,fuzzing",
        f"--max-examples={max_examples}",
        "--seed=1",  # the same cases on every run: a failure reproduces
        "--request-timeout=10",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert "passed" in done.stdout.split("SUMMARY")[-1]


@pytest.mark.parametrize("prefix", ["/v2/models/echo", "/v2/models/iris/versions/1"])
def test_fuzz_a_model_document(docs_server: ServerProcess, prefix: str, tmp_path: Path) -> None:
    fuzz(f"{docs_server.url}{prefix}/docs/dataplane.json", tmp_path / "schemathesis.toml")


# The whole document's fuzz takes half a minute of CI at 25 examples an operation: 8 in
# CI, 25 in the long set.
@pytest.mark.parametrize(
    "max_examples", [8, pytest.param(25, marks=pytest.mark.long)], ids=["short", "long"]
)
def test_fuzz_the_dataplane_document(start: Any, tmp_path: Path, max_examples: int) -> None:
    """On its own server: the fuzzer unloads the models it finds in the index."""
    server = start(build_docs_repository(tmp_path / "repository"))
    fuzz(server.url + "/v2/docs/dataplane.json", tmp_path / "schemathesis.toml", max_examples)
    assert server.process.poll() is None


@pytest.mark.parametrize(
    "where",
    [
        {"parameters": {"big": 2**64}},
        {"parameters": {"nested": [{"big": -(2**63) - 1}]}},
        {"outputs": [{"name": "features", "parameters": {"big": 2**70}}]},
    ],
)
def test_integers_beyond_64_bits_in_parameters_are_400(
    client: httpx.Client, where: dict[str, Any]
) -> None:
    """They used to reach the model and fail with a 500 when echoed back (orjson)."""
    features = {"name": "features", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}
    declared = [  # echo declares its inputs: a request carries them all
        {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]},
        {"name": "mask", "shape": [2], "datatype": "BOOL", "data": [True, False]},
    ]
    body = json.dumps({"inputs": [features, *declared], **where})
    response = client.post("/v2/models/echo/infer", content=body)
    assert response.status_code == 400, response.text
    assert "integer beyond 64 bits" in response.json()["error"]
    features["parameters"] = {"big": 2**64 - 1}  # the largest a UINT64 holds is fine
    fitting = {"inputs": [features, *declared]}
    assert client.post("/v2/models/echo/infer", json=fitting).status_code == 200


def test_a_wrong_method_is_405_naming_the_allowed_ones(client: httpx.Client) -> None:
    """RFC 9110 requires Allow on a 405 (schemathesis' unsupported_method check)."""
    response = client.delete("/v2/docs/dataplane.json")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD"
    assert client.get("/v2/models/echo/infer").headers["allow"] == "POST"
