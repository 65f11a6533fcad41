"""Swagger UI and the OpenAPI documents, served by inferd itself.

``/v2/docs`` shows the whole V2 REST API, ``/v2/models/{name}[/versions/{v}]/docs``
one model with an example request built from its declared inputs; each page's
document is beside it at ``.../docs/dataplane.json`` (server/docs/openapi.py builds them).
Swagger UI's files come from the swagger-ui-py package and are served from
``/v2/docs/static``, so the docs work with no network. None of this is on the
inference hot path: these routes go through Starlette, not the fast path.
"""

from __future__ import annotations

import html
import importlib.util
from pathlib import Path

import orjson
from starlette.requests import Request
from starlette.responses import Response

from inferd.errors import InferdError
from inferd.server.docs.openapi import api_document, model_document, model_prefix, model_title
from inferd.server.docs.parts import Schema
from inferd.server.rest.codec import JSON_CONTENT_TYPE, error_body
from inferd.server.routes import ASSET_TYPES, ASSETS_PATH, SPEC_FILE
from inferd.serving.dataplane import DataPlane

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="icon" type="image/png" href="{assets}/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({{
  url: {spec_url}, dom_id: "#swagger-ui", deepLinking: true,
  displayRequestDuration: true, validatorUrl: null
}});
</script>
</body>
</html>
"""


def swagger_page(title: str, spec_url: str, root_path: str) -> bytes:
    # The URL goes into a <script>: JSON-quote it and keep "</" from closing the tag.
    quoted_url = orjson.dumps(spec_url).decode().replace("</", "<\\/")
    assets = html.escape(root_path + ASSETS_PATH)
    return _PAGE.format(title=html.escape(title), assets=assets, spec_url=quoted_url).encode()


class SwaggerAssets:
    """Swagger UI's files from the swagger-ui-py package, read once, kept in memory."""

    def __init__(self) -> None:
        self._files: dict[str, bytes] = {}

    def read(self, name: str) -> bytes:
        if name not in self._files:
            self._files[name] = (_assets_folder() / name).read_bytes()
        return self._files[name]


def _assets_folder() -> Path:
    # find_spec locates the package without importing it (its __init__ pulls in
    # jinja2 and YAML for its own web-framework helpers, which inferd does not use).
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise InferdError(
            "Swagger UI's files are missing: install them with `pip install swagger-ui-py`"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "static"


class DocsEndpoints:
    """The docs routes' handlers (see routes.API_ROUTES): Swagger UI pages, OpenAPI
    documents, Swagger UI's files."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane
        self.assets = SwaggerAssets()

    async def api_spec(self, request: Request) -> Response:
        document = api_document(self.dataplane.server_metadata(), _root_path(request))
        return _json_response(document)

    async def api_page(self, request: Request) -> Response:
        root = _root_path(request)
        title = f"{self.dataplane.server_metadata().name} V2 inference API"
        return _html_response(swagger_page(title, f"{root}/v2/docs/{SPEC_FILE}", root))

    async def model_spec(self, request: Request) -> Response:
        name, version = request.path_params["name"], request.path_params.get("version")
        metadata = self.dataplane.model_metadata(name, version)
        return _json_response(model_document(metadata, version, _root_path(request)))

    async def model_page(self, request: Request) -> Response:
        name, version = request.path_params["name"], request.path_params.get("version")
        self.dataplane.model_metadata(name, version)  # 404 / 503 here, not inside the page
        root = _root_path(request)
        spec_url = f"{root}{model_prefix(name, version)}/docs/{SPEC_FILE}"
        return _html_response(swagger_page(model_title(name, version), spec_url, root))

    async def asset(self, request: Request) -> Response:
        name = request.path_params["file"]
        media_type = ASSET_TYPES.get(name)
        if media_type is None:
            message = f"No Swagger UI file {name!r}; there are {', '.join(ASSET_TYPES)}"
            return Response(error_body(message), 404, media_type=JSON_CONTENT_TYPE)
        headers = {"cache-control": "public, max-age=3600"}
        return Response(self.assets.read(name), media_type=media_type, headers=headers)


def _root_path(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _json_response(content: Schema) -> Response:
    return Response(orjson.dumps(content), media_type=JSON_CONTENT_TYPE)


def _html_response(content: bytes) -> Response:
    return Response(content, media_type="text/html; charset=utf-8")
