"""The OpenAPI operation of each REST route: what it takes, what it answers, its errors.

One builder per operation of routes.API_ROUTES (a route and its per-version
twin share one); server/docs/openapi.py puts them together into documents.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from inferd.server.rest.codec import BINARY_CONTENT_TYPE, JSON_CONTENT_TYPE
from inferd.server.routes import ASSET_TYPES, ApiRoute

Schema = dict[str, Any]
REF = "#/components/schemas/{name}"
# As clients write it; the server reads it in any case.
_HEADER_LENGTH = "Inference-Header-Content-Length"

_ERRORS = {
    400: "The request is malformed or does not fit the model; the message says what is wrong",
    404: "No model (or version) of that name is loaded",
    413: "The request body is larger than max_request_size",
    500: "The model failed; the message is its error",
    503: "The model is not ready (loading, unloading or failed to load) or the server is "
    "overloaded (Retry-After says when to retry)",
}
_PATH_PARAMETERS = {
    "name": "The model's name, as in the repository index",
    "version": "One of the model's versions (its parameters.version)",
    "file": "One of Swagger UI's files",
    "region": "The name the shared memory region is (to be) registered under",
}
_INFER_DESCRIPTION = (
    "Runs the model on the request's inputs. The body is JSON, or, with the binary "
    "tensor data extension, a JSON header of Inference-Header-Content-Length bytes "
    "followed by each input's raw little-endian bytes (parameters.binary_data_size "
    "per input; BYTES elements as a 4-byte length and the bytes). Bodies may be "
    "gzip or deflate compressed (Content-Encoding). Outputs asked for with "
    "binary_data come back the same way, as application/octet-stream."
)
_INFER_STREAM_DESCRIPTION = (
    "Runs the model on a V2 request (as /infer takes it) and answers each response as "
    "a server-sent event as soon as the model yields it (a model that does not stream "
    "answers one event), outputs as JSON whatever binary_data asks. Errors before the "
    "first event are ordinary JSON answers with their status. Closing the connection "
    "stops the model."
)
_GENERATE_DESCRIPTION = (
    "The request is one flat JSON object: keys naming the model's declared inputs become "
    "those inputs (their declared datatype and shape), other keys and the entries of "
    "`parameters` become request parameters; a model that declares no inputs gets every "
    "key as an input typed from its JSON value. The answer is flat too: model_name, "
    "model_version, id, and one key per output (one element as a value, more as a list). "
    "A V2 inference request (its `inputs` a list of objects; MLServer's clients send "
    "these) is answered as {route} answers it."
)
_GENERATE_EXAMPLE = {"text_input": "Hello", "parameters": {"max_tokens": 16}}
EVENT_STREAM_MEDIA_TYPE = "text/event-stream"
_STRING = {"type": "string"}
_BINARY = {"type": "string", "format": "binary"}
_LENGTH = {"type": "integer", "minimum": 0}


def operation(route: ApiRoute, example: Schema) -> Schema:
    """The OpenAPI operation of ``route``; ``example`` is the inference request shown."""
    return _BUILDERS[route.operation](route.operation_id, example)


def path_parameters(path: str) -> list[Schema]:
    """The parameters of a path template such as ``/v2/models/{name}``."""
    parameters = []
    for name in re.findall(r"{(\w+)}", path):
        schema: Schema = {"type": "string"}
        if name == "file":
            schema["enum"] = list(ASSET_TYPES)
        description = _PATH_PARAMETERS[name]
        parameters.append(
            {
                "name": name,
                "in": "path",
                "required": True,
                "description": description,
                "schema": schema,
            }
        )
    return parameters


def _ref(name: str) -> Schema:
    return {"$ref": REF.format(name=name)}


def _answer(description: str, schema: Schema, media_type: str = JSON_CONTENT_TYPE) -> Schema:
    return {"description": description, "content": {media_type: {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Schema]:
    return {str(status): _answer(_ERRORS[status], _ref("Error")) for status in statuses}


def _op(operation_id: str, tag: str, summary: str, responses: Schema, **more: Any) -> Schema:
    head = {"operationId": operation_id, "tags": [tag], "summary": summary}
    return head | more | {"responses": responses}


# ---- health and metadata ----


def _server_health(field: str, schema: str) -> Callable[[str, Schema], Schema]:
    def build(operation_id: str, example: Schema) -> Schema:
        answers = {
            "200": _answer(schema, _ref(schema)),
            "503": _answer(f"Not {field}", _ref(schema)),
        }
        return _op(operation_id, "health", f"Is the server {field}?", answers)

    return build


def _server_metadata(operation_id: str, example: Schema) -> Schema:
    metadata = {"200": _answer("Name, version and extensions", _ref("ServerMetadata"))}
    return _op(operation_id, "metadata", "Server metadata", metadata)


def _model_metadata(operation_id: str, example: Schema) -> Schema:
    metadata = {"200": _answer("The model's metadata", _ref("ModelMetadata"))}
    return _op(operation_id, "metadata", "Model metadata", metadata | _errors(404, 503))


def _model_ready(operation_id: str, example: Schema) -> Schema:
    ready = {
        "200": _answer("The model is ready", _ref("ModelReady")),
        "503": _answer("The model is loading, unloading or failed to load", _ref("ModelReady")),
    }
    return _op(operation_id, "health", "Is the model ready?", ready | _errors(404))


# ---- inference and statistics ----


def _v2_request(example: Schema) -> Schema:
    request = {
        JSON_CONTENT_TYPE: {"schema": _ref("InferenceRequest"), "example": example},
        BINARY_CONTENT_TYPE: {"schema": _BINARY},
    }
    return {"required": True, "content": request}


def _inference_errors() -> dict[str, Schema]:
    """What an inference route answers when it fails (a stream: before its first event)."""
    errors = _errors(400, 404, 413, 500, 503)
    retry = {"description": "When the server is overloaded: seconds to wait", "schema": _LENGTH}
    errors["503"]["headers"] = {"Retry-After": retry}
    return errors


def _model_infer(operation_id: str, example: Schema) -> Schema:
    ok = _answer("The outputs", _ref("InferenceResponse"))
    ok["content"][BINARY_CONTENT_TYPE] = {"schema": _BINARY}
    length = "With binary outputs: the length of the JSON header"
    ok["headers"] = {_HEADER_LENGTH: {"description": length, "schema": _LENGTH}}
    header = {"name": _HEADER_LENGTH, "in": "header", "description": length, "schema": _LENGTH}
    return _op(
        operation_id,
        "inference",
        "Inference",
        {"200": ok} | _inference_errors(),
        description=_INFER_DESCRIPTION,
        parameters=[header],
        requestBody=_v2_request(example),
    )


def _events(what: str) -> Schema:
    return _answer(
        f"Server-sent events, one per response as the model yields it: `data: <{what} "
        "JSON>`; an error after the first event ends the stream with `event: error` and "
        '`data: {"error": "<message>"}`',
        _sse_event(what),
        EVENT_STREAM_MEDIA_TYPE,
    )


def _sse_event(what: str) -> Schema:
    """One server-sent event, as SSE parsers (and schemathesis) see it: its fields."""
    return {
        "type": "object",
        "properties": {
            "event": {"type": "string", "enum": ["message", "error"]},
            "data": {
                "type": "string",
                "description": f'A {what} as JSON; with event "error", {{"error": "<message>"}}',
            },
        },
        "required": ["data"],
    }


def _binary_inputs_header() -> Schema:
    return {
        "name": _HEADER_LENGTH,
        "in": "header",
        "description": "With binary inputs: the length of the JSON header",
        "schema": _LENGTH,
    }


def _model_infer_stream(operation_id: str, example: Schema) -> Schema:
    return _op(
        operation_id,
        "inference",
        "Streaming inference",
        {"200": _events("InferenceResponse")} | _inference_errors(),
        description=_INFER_STREAM_DESCRIPTION,
        parameters=[_binary_inputs_header()],
        requestBody=_v2_request(example),
    )


def _generate_request(example: Schema) -> Schema:
    """A flat body, or a V2 request (JSON or binary) as /infer takes it."""
    flat_or_v2 = {"anyOf": [_ref("GenerateRequest"), _ref("InferenceRequest")]}
    content = {"schema": flat_or_v2, "example": _flat_example(example)}
    binary = {"schema": _BINARY}
    return {"required": True, "content": {JSON_CONTENT_TYPE: content, BINARY_CONTENT_TYPE: binary}}


def _flat_example(example: Schema) -> Schema:
    """The V2 example request as a generate body: each input under its name, its data
    nested to its shape (so "Try it out" sends what the model takes)."""
    inputs = example.get("inputs") or []
    if not inputs:
        return _GENERATE_EXAMPLE
    return {
        tensor["name"]: np.array(tensor["data"], dtype=object).reshape(tensor["shape"]).tolist()
        for tensor in inputs
    }


def _model_generate(operation_id: str, example: Schema) -> Schema:
    flat_or_v2 = {"anyOf": [_ref("GenerateResponse"), _ref("InferenceResponse")]}
    ok = _answer("The outputs, flat (or V2, for a V2 request)", flat_or_v2)
    ok["content"][BINARY_CONTENT_TYPE] = {"schema": _BINARY}
    return _op(
        operation_id,
        "inference",
        "Generate (Triton's generate extension)",
        {"200": ok} | _inference_errors(),
        description=_GENERATE_DESCRIPTION.format(route="/infer"),
        parameters=[_binary_inputs_header()],
        requestBody=_generate_request(example),
    )


def _model_generate_stream(operation_id: str, example: Schema) -> Schema:
    return _op(
        operation_id,
        "inference",
        "Streaming generate (Triton's generate extension)",
        {"200": _events("GenerateResponse")} | _inference_errors(),
        description=_GENERATE_DESCRIPTION.format(route="/infer_stream (InferenceResponse events)")
        + " Each response is one server-sent event.",
        parameters=[_binary_inputs_header()],
        requestBody=_generate_request(example),
    )


def _statistics_answer() -> Schema:
    """Triton's statistics extension: every model, one model, or one version."""
    return {"200": _answer("Statistics", _ref("ModelStatisticsResponse"))}


def _statistics(operation_id: str, example: Schema) -> Schema:
    return _op(operation_id, "statistics", "Statistics of every model", _statistics_answer())


def _model_statistics(operation_id: str, example: Schema) -> Schema:
    answers = _statistics_answer() | _errors(404)
    return _op(operation_id, "statistics", "A model's statistics", answers)


# ---- model repository ----


def _repository_index(operation_id: str, example: Schema) -> Schema:
    listed = "Every model version the server knows, and those only on disk"
    index = {"200": _answer(listed, {"type": "array", "items": _ref("RepositoryIndexEntry")})}
    body = {"content": {JSON_CONTENT_TYPE: {"schema": _ref("RepositoryIndexRequest")}}}
    return _op(
        operation_id,
        "repository",
        "Repository index",
        index | _errors(400, 413),
        description='{"ready": true} lists only READY versions, false only the others.',
        requestBody=body,
    )


def _repository_load(operation_id: str, example: Schema) -> Schema:
    load = {"200": _answer("Every version on disk is loaded", _ref("Empty"))}
    config = {"type": "string", "description": "A JSON configuration override (Triton's)"}
    parameters = {"type": "object", "properties": {"config": config}}
    body = {"type": "object", "properties": {"parameters": parameters}}
    return _op(
        operation_id,
        "repository",
        "(Re)load a model from disk",
        load | _errors(400, 404, 500, 503),
        description="New versions load before old ones unload; a failed reload keeps "
        "the old instance serving. 400: its model-settings.json is invalid, or the "
        "config override is (it may set only serving settings).",
        # The example (what Swagger UI sends): a plain reload, no override.
        requestBody={"content": {JSON_CONTENT_TYPE: {"schema": body, "example": {}}}},
    )


def _repository_unload(operation_id: str, example: Schema) -> Schema:
    unload = {"200": _answer("Every version is unloaded", _ref("Empty"))}
    return _op(operation_id, "repository", "Unload a model", unload | _errors(404))


# ---- Triton's model configuration and logging extensions ----

_FLAG = {"type": "boolean"}
_LOG_FIELDS = {"log_file": _STRING, "log_info": _FLAG, "log_warning": _FLAG, "log_error": _FLAG}
_LOG_SETTINGS: Schema = {
    "type": "object",
    "properties": _LOG_FIELDS | {"log_verbose_level": _LENGTH, "log_format": _STRING},
    "additionalProperties": False,
}


def _model_config(operation_id: str, example: Schema) -> Schema:
    config = {"200": _answer("Triton's model configuration", {"type": "object"})}
    return _op(operation_id, "metadata", "Model configuration", config | _errors(404, 503))


def _log_settings(operation_id: str, example: Schema) -> Schema:
    return _op(operation_id, "logging", "Log settings", {"200": _answer("Now", _LOG_SETTINGS)})


def _update_log_settings(operation_id: str, example: Schema) -> Schema:
    # What Swagger UI sends: a change that leaves the server as it runs by default.
    media = {"schema": _LOG_SETTINGS, "example": {"log_info": True, "log_verbose_level": 0}}
    body = {"required": True, "content": {JSON_CONTENT_TYPE: media}}
    answers = {"200": _answer("The log settings now", _LOG_SETTINGS)} | _errors(400)
    why = "log_verbose_level > 0: DEBUG, else the lowest of log_info, log_warning, log_error"
    return _op(
        operation_id,
        "logging",
        "Change the log settings",
        answers,
        description=why,
        requestBody=body,
    )


_BUILDERS: dict[str, Callable[[str, Schema], Schema]] = {
    "server_live": _server_health("live", "Live"),
    "server_ready": _server_health("ready", "Ready"),
    "server_metadata": _server_metadata,
    "model_metadata": _model_metadata,
    "model_ready": _model_ready,
    "model_infer": _model_infer,
    "model_infer_stream": _model_infer_stream,
    "model_generate": _model_generate,
    "model_generate_stream": _model_generate_stream,
    "statistics": _statistics,
    "model_statistics": _model_statistics,
    "repository_index": _repository_index,
    "repository_load": _repository_load,
    "repository_unload": _repository_unload,
    "model_config": _model_config,
    "log_settings": _log_settings,
    "update_log_settings": _update_log_settings,
}
