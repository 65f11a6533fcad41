"""The OpenAPI operation of each REST route: what it takes, what it answers, its errors.

One builder per operation of routes.API_ROUTES (a route and its per-version
twin share one): the inference and statistics routes' in inference_operations.py,
the shared memory extension's in shm_operations.py, the docs routes' in
docs_operations.py, the others here, all from the pieces of parts.py;
server/docs/openapi.py puts them together into documents.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from inferd.server.docs.inference_operations import INFERENCE_OPERATIONS
from inferd.server.docs.parts import LENGTH, STRING, Schema, answer, errors, op, ref
from inferd.server.rest.codec import JSON_CONTENT_TYPE
from inferd.server.routes import ASSET_TYPES, ApiRoute

_PATH_PARAMETERS = {
    "name": "The model's name, as in the repository index",
    "version": "One of the model's versions (its parameters.version)",
    "file": "One of Swagger UI's files",
    "region": "The name the shared memory region is (to be) registered under",
    "model": "A model's name, as GET /v1/models lists it",
}


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


# ---- health and metadata ----


def _server_health(field: str, schema: str) -> Callable[[str, Schema], Schema]:
    def build(operation_id: str, example: Schema) -> Schema:
        answers = {
            "200": answer(schema, ref(schema)),
            "503": answer(f"Not {field}", ref(schema)),
        }
        return op(operation_id, "health", f"Is the server {field}?", answers)

    return build


def _server_metadata(operation_id: str, example: Schema) -> Schema:
    metadata = {"200": answer("Name, version and extensions", ref("ServerMetadata"))}
    return op(operation_id, "metadata", "Server metadata", metadata)


def _model_metadata(operation_id: str, example: Schema) -> Schema:
    metadata = {"200": answer("The model's metadata", ref("ModelMetadata"))}
    return op(operation_id, "metadata", "Model metadata", metadata | errors(404, 503))


def _model_ready(operation_id: str, example: Schema) -> Schema:
    ready = {
        "200": answer("The model is ready", ref("ModelReady")),
        "503": answer("The model is loading, unloading or failed to load", ref("ModelReady")),
    }
    return op(operation_id, "health", "Is the model ready?", ready | errors(404))


# ---- model repository ----


def _repository_index(operation_id: str, example: Schema) -> Schema:
    listed = "Every model version the server knows, and those only on disk"
    index = {"200": answer(listed, {"type": "array", "items": ref("RepositoryIndexEntry")})}
    body = {"content": {JSON_CONTENT_TYPE: {"schema": ref("RepositoryIndexRequest")}}}
    return op(
        operation_id,
        "repository",
        "Repository index",
        index | errors(400, 413),
        description='{"ready": true} lists only READY versions, false only the others.',
        requestBody=body,
    )


def _repository_load(operation_id: str, example: Schema) -> Schema:
    load = {"200": answer("Every version on disk is loaded", ref("Empty"))}
    config = {"type": "string", "description": "A JSON configuration override (Triton's)"}
    parameters = {"type": "object", "properties": {"config": config}}
    body = {"type": "object", "properties": {"parameters": parameters}}
    return op(
        operation_id,
        "repository",
        "(Re)load a model from disk",
        load | errors(400, 404, 500, 503),
        description="New versions load before old ones unload; a failed reload keeps "
        "the old instance serving. 400: its model-settings.json is invalid, or the "
        "config override is (it may set only serving settings).",
        # The example (what Swagger UI sends): a plain reload, no override.
        requestBody={"content": {JSON_CONTENT_TYPE: {"schema": body, "example": {}}}},
    )


def _repository_unload(operation_id: str, example: Schema) -> Schema:
    unload = {"200": answer("Every version is unloaded", ref("Empty"))}
    return op(operation_id, "repository", "Unload a model", unload | errors(404))


# ---- Triton's model configuration and logging extensions ----

_FLAG = {"type": "boolean"}
_LOG_FIELDS = {"log_file": STRING, "log_info": _FLAG, "log_warning": _FLAG, "log_error": _FLAG}
_LOG_SETTINGS: Schema = {
    "type": "object",
    "properties": _LOG_FIELDS | {"log_verbose_level": LENGTH, "log_format": STRING},
    "additionalProperties": False,
}


def _model_config(operation_id: str, example: Schema) -> Schema:
    config = {"200": answer("Triton's model configuration", {"type": "object"})}
    return op(operation_id, "metadata", "Model configuration", config | errors(404, 503))


def _log_settings(operation_id: str, example: Schema) -> Schema:
    return op(operation_id, "logging", "Log settings", {"200": answer("Now", _LOG_SETTINGS)})


def _update_log_settings(operation_id: str, example: Schema) -> Schema:
    # What Swagger UI sends: a change that leaves the server as it runs by default.
    media = {"schema": _LOG_SETTINGS, "example": {"log_info": True, "log_verbose_level": 0}}
    body = {"required": True, "content": {JSON_CONTENT_TYPE: media}}
    answers = {"200": answer("The log settings now", _LOG_SETTINGS)} | errors(400)
    why = "log_verbose_level > 0: DEBUG, else the lowest of log_info, log_warning, log_error"
    return op(
        operation_id,
        "logging",
        "Change the log settings",
        answers,
        description=why,
        requestBody=body,
    )


# ---- Triton's trace extension (server/trace_api.py) ----

_NUMBER_TEXT = {"type": ["string", "integer", "null"]}  # Triton's numbers as strings
_TRACE_SETTINGS: Schema = {
    "type": "object",
    "properties": {
        "trace_level": {"type": ["array", "string", "null"], "items": STRING},
        "trace_rate": _NUMBER_TEXT,
        "trace_count": _NUMBER_TEXT,
        "log_frequency": _NUMBER_TEXT,
        "trace_file": STRING,
        "trace_mode": STRING,
    },
}
_TRACE_SCOPE = "The model's settings (those it sets, else the server's) under /v2/models/{name}"


def _trace_settings(operation_id: str, example: Schema) -> Schema:
    answers = {"200": answer("The trace settings in force", _TRACE_SETTINGS)} | errors(400)
    return op(operation_id, "trace", "Trace settings", answers, description=_TRACE_SCOPE)


def _update_trace_settings(operation_id: str, example: Schema) -> Schema:
    # What Swagger UI sends: tracing off, as the server runs by default.
    # trace_mode, as a read answers it, may be sent back: any value, ignored.
    ignored = {"description": "Ignored: inferd's mode is always opentelemetry"}
    changes = _TRACE_SETTINGS | {
        "properties": _TRACE_SETTINGS["properties"] | {"trace_mode": ignored}
    }
    media = {"schema": changes, "example": {"trace_level": ["OFF"]}}
    body = {"content": {JSON_CONTENT_TYPE: media}}
    answers = {"200": answer("The trace settings now", _TRACE_SETTINGS)} | errors(400)
    why = "A setting given null is cleared (a model's then follows the server's)."
    return op(
        operation_id,
        "trace",
        "Change the trace settings",
        answers,
        description=f"{why} {_TRACE_SCOPE}.",
        requestBody=body,
    )


_BUILDERS: dict[str, Callable[[str, Schema], Schema]] = INFERENCE_OPERATIONS | {
    "server_live": _server_health("live", "Live"),
    "server_ready": _server_health("ready", "Ready"),
    "server_metadata": _server_metadata,
    "model_metadata": _model_metadata,
    "model_ready": _model_ready,
    "repository_index": _repository_index,
    "repository_load": _repository_load,
    "repository_unload": _repository_unload,
    "model_config": _model_config,
    "log_settings": _log_settings,
    "update_log_settings": _update_log_settings,
    "trace_settings": _trace_settings,
    "update_trace_settings": _update_trace_settings,
    "model_trace_settings": _trace_settings,
    "update_model_trace_settings": _update_trace_settings,
}
