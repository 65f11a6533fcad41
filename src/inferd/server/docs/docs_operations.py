"""The OpenAPI operations of the documentation routes (server/docs/pages.py): the API's
and each model's Swagger UI page and document, and Swagger UI's files."""

from __future__ import annotations

from inferd.server.docs.parts import STRING, Schema, answer, errors, op, ref
from inferd.server.routes import ASSET_TYPES

_DOCS_SUMMARY = "A model's docs"


def _page() -> Schema:
    return {"200": answer("Swagger UI", STRING, "text/html")}


def _spec() -> Schema:
    return {"200": answer("An OpenAPI 3.1 document", {"type": "object"})}


def _docs_page(operation_id: str, example: Schema) -> Schema:
    return op(operation_id, "docs", "This API in Swagger UI", _page())


def _docs_spec(operation_id: str, example: Schema) -> Schema:
    return op(operation_id, "docs", "This document", _spec())


def _docs_asset(operation_id: str, example: Schema) -> Schema:
    files = {media_type.split(";")[0]: {"schema": STRING} for media_type in ASSET_TYPES.values()}
    asset = {"description": "The file", "content": files}
    answers = {"200": asset, "404": answer("No such file", ref("Error"))}
    return op(operation_id, "docs", "Swagger UI's files", answers)


def _model_docs_page(operation_id: str, example: Schema) -> Schema:
    return op(operation_id, "docs", _DOCS_SUMMARY, _page() | errors(404, 503))


def _model_docs_spec(operation_id: str, example: Schema) -> Schema:
    return op(operation_id, "docs", _DOCS_SUMMARY, _spec() | errors(404, 503))


DOCS_OPERATIONS = {
    "docs_page": _docs_page,
    "docs_spec": _docs_spec,
    "docs_asset": _docs_asset,
    "model_docs_page": _model_docs_page,
    "model_docs_spec": _model_docs_spec,
}
