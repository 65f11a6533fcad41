"""The REST API reference page: the OpenAPI document the server serves at
``/v2/docs/dataplane.json`` (inferd.server.docs.openapi), built for a server with no
models, and listed operation by operation; the document itself is published beside
the page (``openapi.json``)."""

from __future__ import annotations

import json
from typing import Any

from inferd.server.docs.openapi import api_document
from inferd.types import ServerMetadata
from inferd.version import __version__

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")

INTRO = """\
# REST API

Every REST operation, generated when the site is built from the OpenAPI 3.1 document
the server serves at `/v2/docs/dataplane.json` (Swagger UI at `/v2/docs`, one
document per model at `/v2/models/{{name}}/docs/dataplane.json`). The whole document:
[openapi.json](openapi.json). Guides: [REST and gRPC](../protocols.md),
[Streaming and generation](../streaming.md).

inferd {version}; paths are below the server's `root_path` when one is set.
"""


def document() -> dict[str, Any]:
    return api_document(ServerMetadata("inferd", __version__, []), "")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if ref:
        return str(ref).rsplit("/", 1)[-1]
    if "items" in schema:
        return f"array of {_schema_name(schema['items'])}"
    return str(schema.get("type", "object"))


def _operation(
    method: str, path: str, operation: dict[str, Any], shared: list[dict[str, Any]]
) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", ""]
    if operation.get("summary"):
        lines += [f"**{_cell(operation['summary'])}**", ""]
    if operation.get("description"):
        lines += [str(operation["description"]).strip(), ""]
    parameters = [*shared, *operation.get("parameters", [])]
    if parameters:
        lines += ["| parameter | in | required | what it is |", "|---|---|---|---|"]
        for parameter in parameters:
            required = "yes" if parameter.get("required") else "no"
            text = _cell(parameter.get("description", ""))
            lines.append(f"| `{parameter['name']}` | {parameter['in']} | {required} | {text} |")
        lines.append("")
    body = operation.get("requestBody", {}).get("content", {})
    if body:
        kinds = ", ".join(
            f"`{kind}` ({_schema_name(v.get('schema', {}))})" for kind, v in body.items()
        )
        lines += [f"Request body: {kinds}.", ""]
    answers = operation.get("responses", {})
    if answers:
        lines += ["| status | answer |", "|---|---|"]
        lines += [
            f"| {status} | {_cell(a.get('description', ''))} |" for status, a in answers.items()
        ]
        lines.append("")
    return lines


def page() -> str:
    spec = document()
    by_tag: dict[str, list[str]] = {}
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                operation = item[method]
                tag = (operation.get("tags") or ["Other"])[0]
                shared = item.get("parameters", [])
                by_tag.setdefault(tag, []).extend(_operation(method, path, operation, shared))
    lines = [INTRO.format(version=__version__)]
    for tag, operations in by_tag.items():
        lines += [f"## {tag}", "", *operations]
    return "\n".join(lines)


def openapi_json() -> str:
    return json.dumps(document(), indent=2)
