"""The OpenAPI operations of the OpenAI-compatible routes (server/openai/): their
bodies are the Structs the edge decodes them with (server/openai/wire.py)."""

from __future__ import annotations

from collections.abc import Callable

from inferd.server.docs.parts import Schema, answer, op, ref

_TAG = "openai"
_OBJECT = {"type": "object"}
_ERROR = {"type": "object", "properties": {"error": _OBJECT}}
_STREAM = "text/event-stream"


def _errors(*statuses: int) -> Schema:
    described = {
        400: "The request is malformed; error.param names the field",
        401: "The API is restricted: send an accepted key as Authorization: Bearer <key>",
        404: "No model of that name serves this endpoint",
        413: "The request body is larger than max_request_size",
        429: "The model's queue is full; Retry-After says when to retry",
        503: "The model is not ready (loading, unloading or failed to load)",
    }
    return {str(s): answer(described[s], _ERROR) for s in statuses}


def _body(name: str) -> Schema:
    return {"required": True, "content": {"application/json": {"schema": ref(name)}}}


def _generation(summary: str, body: str, answers: str) -> Callable[[str, Schema], Schema]:
    def build(operation_id: str, example: Schema) -> Schema:
        done = {
            "description": f"A {answers}, or with stream: true its chunks as server-sent "
            "events ending with data: [DONE]",
            "content": {"application/json": {"schema": _OBJECT}, _STREAM: {"schema": _OBJECT}},
        }
        responses = {"200": done} | _errors(400, 401, 404, 413, 429, 503)
        return op(operation_id, _TAG, summary, responses, requestBody=_body(body))

    return build


def _models(operation_id: str, example: Schema) -> Schema:
    listed = answer("The models that serve the OpenAI-compatible endpoints", _OBJECT)
    return op(operation_id, _TAG, "Models", {"200": listed} | _errors(401))


def _model(operation_id: str, example: Schema) -> Schema:
    found = answer("The model", _OBJECT)
    return op(operation_id, _TAG, "One model", {"200": found} | _errors(401, 404, 503))


def _embeddings(operation_id: str, example: Schema) -> Schema:
    vectors = answer("One embedding per input (float lists or base64 float32)", _OBJECT)
    responses = {"200": vectors} | _errors(400, 401, 404, 413, 429, 503)
    return op(operation_id, _TAG, "Embeddings", responses, requestBody=_body("Embedding"))


OPENAI_OPERATIONS: dict[str, Callable[[str, Schema], Schema]] = {
    "openai_models": _models,
    "openai_model": _model,
    "openai_completions": _generation("Completions", "Completion", "text_completion"),
    "openai_chat_completions": _generation("Chat completions", "ChatCompletion", "chat.completion"),
    "openai_embeddings": _embeddings,
}
