"""The pieces every OpenAPI operation is built from: references, answers, errors."""

from __future__ import annotations

from typing import Any

from inferd.server.rest.codec import JSON_CONTENT_TYPE

Schema = dict[str, Any]
REF = "#/components/schemas/{name}"
STRING = {"type": "string"}
LENGTH = {"type": "integer", "minimum": 0}

ERRORS = {
    400: "The request is malformed or does not fit the model; the message says what is wrong",
    404: "No model (or version) of that name is loaded",
    413: "The request body is larger than max_request_size",
    500: "The model failed; the message is its error",
    503: "The model is not ready (loading, unloading or failed to load) or the server is "
    "overloaded (Retry-After says when to retry)",
}


def ref(name: str) -> Schema:
    return {"$ref": REF.format(name=name)}


def answer(description: str, schema: Schema, media_type: str = JSON_CONTENT_TYPE) -> Schema:
    return {"description": description, "content": {media_type: {"schema": schema}}}


def errors(*statuses: int) -> dict[str, Schema]:
    return {str(status): answer(ERRORS[status], ref("Error")) for status in statuses}


def op(operation_id: str, tag: str, summary: str, responses: Schema, **more: Any) -> Schema:
    head = {"operationId": operation_id, "tags": [tag], "summary": summary}
    return head | more | {"responses": responses}
