"""The OpenAPI 3.1 document of the V2 REST API (served by server/docs.py).

The schemas are generated (``msgspec.json.schema_components``) from the Structs
the server decodes requests with and the Structs that describe its answers
(server/codec_rest.py), so the document follows the code instead of drifting
from it; only prose and the checks the decoder makes after msgspec
(_REFINEMENTS) are added here, and a field they name that went away fails loudly.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any
from urllib.parse import quote

import msgspec

from ..datatypes import DATATYPES
from ..types import MetadataTensor, ModelMetadata, ServerMetadata
from . import codec_rest as bodies
from .codec_rest import BINARY_CONTENT_TYPE, JSON_CONTENT_TYPE

Schema = dict[str, Any]

OPENAPI_VERSION = "3.1.0"
SPEC_FILE = "dataplane.json"
ASSETS_PATH = "/v2/docs/static"
ASSET_TYPES = {
    "swagger-ui.css": "text/css; charset=utf-8",
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
MODEL_PREFIXES = ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")
_REF = "#/components/schemas/{name}"
HEADER_LENGTH = "Inference-Header-Content-Length"

# Component names for the decoding Structs, whose Python names are private.
_PUBLIC_NAMES = {
    "_RequestBody": "InferenceRequest",
    "_InputBody": "RequestInput",
    "_OutputBody": "RequestOutput",
    "_RepositoryIndexBody": "RepositoryIndexRequest",
}
_DOCUMENTED_STRUCTS: tuple[type, ...] = (
    bodies._RequestBody,
    bodies._RepositoryIndexBody,
    bodies.InferenceResponseBody,
    bodies.ModelMetadataBody,
    bodies.ServerMetadataBody,
    bodies.LiveBody,
    bodies.ReadyBody,
    bodies.ModelReadyBody,
    bodies.RepositoryIndexEntryBody,
    bodies.EmptyBody,
    bodies.ErrorBody,
    bodies.ModelStatisticsResponseBody,
)
# What the decoder's own checks add to the Structs' types (datatypes.py, encoding.check_shape).
_DATATYPE = {"enum": list(DATATYPES)}
_REFINEMENTS: dict[tuple[str, str], Schema] = {
    ("RequestInput", "datatype"): _DATATYPE,
    ("RequestInput", "shape"): {"items": {"type": "integer", "minimum": 0}},
    ("RequestInput", "data"): {
        "description": "The values, nested as the shape or flat in row-major order; "
        "BYTES as strings. Leave it out when parameters.binary_data_size is set.",
    },
    ("RequestInput", "parameters"): {
        "description": "binary_data_size: bytes of this input after the JSON header "
        "(binary tensor extension); content_type: how the model decodes it (np, str, ...)",
    },
    ("RequestOutput", "parameters"): {
        "description": "binary_data: true sends this output as raw bytes after the JSON header",
    },
    ("InferenceRequest", "outputs"): {
        "description": "Outputs to return (default: all the model returns)",
    },
    ("InferenceRequest", "parameters"): {
        "description": "binary_data_output: true sends every output as raw bytes; "
        "content_type: how the model decodes the request",
    },
    ("ResponseOutput", "datatype"): _DATATYPE,
    ("MetadataTensor", "datatype"): _DATATYPE,
}

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
}
_GENERIC_EXAMPLE = {
    "inputs": [
        {"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}
    ]
}
_INFER_DESCRIPTION = (
    "Runs the model on the request's inputs. The body is JSON, or, with the binary "
    "tensor data extension, a JSON header of Inference-Header-Content-Length bytes "
    "followed by each input's raw little-endian bytes (parameters.binary_data_size "
    "per input; BYTES elements as a 4-byte length and the bytes). Bodies may be "
    "gzip or deflate compressed (Content-Encoding). Outputs asked for with "
    "binary_data come back the same way, as application/octet-stream."
)


@functools.cache
def components() -> dict[str, Schema]:
    """The schemas of every documented body, under their public names."""
    _, raw = msgspec.json.schema_components(_DOCUMENTED_STRUCTS, ref_template=_REF)
    names = {name: public_name(name) for name in raw}
    schemas: dict[str, Schema] = {}
    for name, schema in raw.items():
        public = schemas[names[name]] = _with_public_refs(schema, names)
        public["title"] = names[name]
        if "description" in public:  # a docstring, indented as in the source
            public["description"] = inspect.cleandoc(public["description"])
    schemas["ModelState"]["type"] = "string"  # msgspec gives an enum of strings no type
    for (struct, field), extra in _REFINEMENTS.items():
        schemas[struct]["properties"][field].update(extra)  # KeyError if a field went away
    return schemas


def public_name(struct_name: str) -> str:
    if struct_name in _PUBLIC_NAMES:
        return _PUBLIC_NAMES[struct_name]
    if struct_name.startswith("_"):
        raise ValueError(f"{struct_name} needs a public name in openapi._PUBLIC_NAMES")
    return struct_name.removesuffix("Body")


def _with_public_refs(node: Any, names: dict[str, str]) -> Any:
    if isinstance(node, list):
        return [_with_public_refs(item, names) for item in node]
    if not isinstance(node, dict):
        return node
    copied = {key: _with_public_refs(value, names) for key, value in node.items()}
    if isinstance(copied.get("$ref"), str):
        copied["$ref"] = _REF.format(name=names[copied["$ref"].rsplit("/", 1)[1]])
    return copied


# ---- The documents ----


def api_document(server: ServerMetadata, root_path: str) -> Schema:
    """The whole V2 REST API, every route of server/rest.py and this module."""
    paths = _health_paths()
    for prefix, suffix in zip(MODEL_PREFIXES, ("", "_version"), strict=True):
        paths.update(_model_paths(prefix, suffix, _GENERIC_EXAMPLE))
    paths.update(_repository_paths())
    paths.update(_statistics_paths())
    paths.update(_docs_paths())
    for path, item in paths.items():
        parameters = _path_parameters(path)
        if parameters:
            item["parameters"] = parameters
    description = (
        "The Open Inference Protocol (KServe V2) over REST. Errors are "
        '`{"error": "<what was wrong>"}`. Every model route also exists under '
        "/v2/models/{name}/versions/{version}; without a version the default one answers. "
        "Each model has its own docs at /v2/models/{name}/docs."
    )
    info = {"title": f"{server.name} V2 inference API", "version": server.version}
    return _document(info | {"description": description}, paths, root_path)


def model_document(metadata: ModelMetadata, version: str | None, root_path: str) -> Schema:
    """The routes of one model (or model version), with an example request for it."""
    paths = _model_paths(model_prefix(metadata.name, version), "", example_request(metadata))
    info = {
        "title": model_title(metadata.name, version),
        "version": version or "default",
        "description": _describe(metadata),
    }
    return _document(info, paths, root_path)


def model_prefix(name: str, version: str | None) -> str:
    """The URL path of a model's routes (a version's, when one is given)."""
    prefix = f"/v2/models/{quote(name, safe='')}"
    if version is not None:
        prefix += f"/versions/{quote(version, safe='')}"
    return prefix


def model_title(name: str, version: str | None) -> str:
    return f"Model {name}" + (f" version {version}" if version is not None else "")


def example_request(metadata: ModelMetadata) -> Schema:
    """A request of one row (-1 dimensions as 1) for the model's declared inputs."""
    if not metadata.inputs:
        return _GENERIC_EXAMPLE
    return {"inputs": [_example_input(tensor) for tensor in metadata.inputs]}


def _example_input(tensor: MetadataTensor) -> Schema:
    shape = [1 if dim < 0 else dim for dim in tensor.shape]
    count = 1
    for dim in shape:
        count *= dim
    value: Any = {"BOOL": False, "BYTES": "text"}.get(tensor.datatype, 0)
    if tensor.datatype.startswith("FP"):
        value = 0.0
    example: Schema = {
        "name": tensor.name,
        "shape": shape,
        "datatype": tensor.datatype,
        "data": [value] * count,
    }
    content_type = tensor.parameters.get("content_type")
    if content_type is not None:
        example["parameters"] = {"content_type": content_type}
    return example


def _describe(metadata: ModelMetadata) -> str:
    lines = [f"Platform: {metadata.platform or 'not declared'}."]
    if metadata.versions:
        lines.append(f"Versions: {', '.join(metadata.versions)}.")
    for title, tensors in (("Inputs", metadata.inputs), ("Outputs", metadata.outputs)):
        if tensors:
            lines += ["", f"| {title.lower()[:-1]} | datatype | shape |", "|---|---|---|"]
            lines += [f"| {t.name} | {t.datatype} | {t.shape} |" for t in tensors]
        else:
            lines += ["", f"{title}: not declared in model-settings.json."]
    return "\n".join(lines)


def _document(info: Schema, paths: dict[str, Schema], root_path: str) -> Schema:
    document: Schema = {"openapi": OPENAPI_VERSION, "info": info}
    if root_path:
        document["servers"] = [{"url": root_path}]
    document["paths"] = paths
    document["components"] = {"schemas": components()}
    return document


# ---- Operations ----

_STRING = {"type": "string"}
_BINARY = {"type": "string", "format": "binary"}
_LENGTH = {"type": "integer", "minimum": 0}


def _ref(name: str) -> Schema:
    return {"$ref": _REF.format(name=name)}


def _answer(description: str, schema: Schema, media_type: str = JSON_CONTENT_TYPE) -> Schema:
    return {"description": description, "content": {media_type: {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Schema]:
    return {str(status): _answer(_ERRORS[status], _ref("Error")) for status in statuses}


def _op(operation_id: str, tag: str, summary: str, responses: Schema, **more: Any) -> Schema:
    head = {"operationId": operation_id, "tags": [tag], "summary": summary}
    return head | more | {"responses": responses}


def _health_paths() -> dict[str, Schema]:
    paths = {}
    for field, schema in (("live", "Live"), ("ready", "Ready")):
        answers = {
            "200": _answer(schema, _ref(schema)),
            "503": _answer(f"Not {field}", _ref(schema)),
        }
        paths[f"/v2/health/{field}"] = {
            "get": _op(f"server_{field}", "health", f"Is the server {field}?", answers)
        }
    metadata = {"200": _answer("Name, version and extensions", _ref("ServerMetadata"))}
    paths["/v2"] = {"get": _op("server_metadata", "metadata", "Server metadata", metadata)}
    return paths


def _model_paths(prefix: str, suffix: str, example: Schema) -> dict[str, Schema]:
    ready = {
        "200": _answer("The model is ready", _ref("ModelReady")),
        "503": _answer("The model is loading, unloading or failed to load", _ref("ModelReady")),
    }
    metadata = {"200": _answer("The model's metadata", _ref("ModelMetadata"))}
    return {
        prefix: {
            "get": _op(
                f"model_metadata{suffix}",
                "metadata",
                "Model metadata",
                metadata | _errors(404, 503),
            )
        },
        f"{prefix}/ready": {
            "get": _op(
                f"model_ready{suffix}", "health", "Is the model ready?", ready | _errors(404)
            )
        },
        f"{prefix}/infer": {"post": _infer_operation(f"model_infer{suffix}", example)},
    }


def _infer_operation(operation_id: str, example: Schema) -> Schema:
    request = {
        JSON_CONTENT_TYPE: {"schema": _ref("InferenceRequest"), "example": example},
        BINARY_CONTENT_TYPE: {"schema": _BINARY},
    }
    ok = _answer("The outputs", _ref("InferenceResponse"))
    ok["content"][BINARY_CONTENT_TYPE] = {"schema": _BINARY}
    length = "With binary outputs: the length of the JSON header"
    ok["headers"] = {HEADER_LENGTH: {"description": length, "schema": _LENGTH}}
    responses = {"200": ok} | _errors(400, 404, 413, 500, 503)
    retry = {"description": "When the server is overloaded: seconds to wait", "schema": _LENGTH}
    responses["503"]["headers"] = {"Retry-After": retry}
    header = {"name": HEADER_LENGTH, "in": "header", "description": length, "schema": _LENGTH}
    return _op(
        operation_id,
        "inference",
        "Inference",
        responses,
        description=_INFER_DESCRIPTION,
        parameters=[header],
        requestBody={"required": True, "content": request},
    )


def _repository_paths() -> dict[str, Schema]:
    listed = "Every model version the server knows, and those only on disk"
    index = {"200": _answer(listed, {"type": "array", "items": _ref("RepositoryIndexEntry")})}
    index_body = {"content": {JSON_CONTENT_TYPE: {"schema": _ref("RepositoryIndexRequest")}}}
    load = {"200": _answer("Every version on disk is loaded", _ref("Empty"))}
    unload = {"200": _answer("Every version is unloaded", _ref("Empty"))}
    return {
        "/v2/repository/index": {
            "post": _op(
                "repository_index",
                "repository",
                "Repository index",
                index | _errors(400, 413),
                description='{"ready": true} lists only READY versions, false only the others.',
                requestBody=index_body,
            )
        },
        "/v2/repository/models/{name}/load": {
            "post": _op(
                "repository_load",
                "repository",
                "(Re)load a model from disk",
                load | _errors(400, 404, 500, 503),
                description="New versions load before old ones unload; a failed reload keeps "
                "the old instance serving. 400: its model-settings.json is invalid.",
            )
        },
        "/v2/repository/models/{name}/unload": {
            "post": _op("repository_unload", "repository", "Unload a model", unload | _errors(404))
        },
    }


def _statistics_paths() -> dict[str, Schema]:
    """Triton's statistics extension: every model, one model, or one version."""
    answer = {"200": _answer("Statistics", _ref("ModelStatisticsResponse"))}
    paths = {
        "/v2/models/stats": {
            "get": _op("statistics", "statistics", "Statistics of every model", answer)
        }
    }
    for prefix, suffix in zip(MODEL_PREFIXES, ("", "_version"), strict=True):
        paths[f"{prefix}/stats"] = {
            "get": _op(
                f"model_statistics{suffix}",
                "statistics",
                "A model's statistics",
                answer | _errors(404),
            )
        }
    return paths


def _docs_paths() -> dict[str, Schema]:
    page = {"200": _answer("Swagger UI", _STRING, "text/html")}
    spec = {"200": _answer("An OpenAPI 3.1 document", {"type": "object"})}
    files = {media_type.split(";")[0]: {"schema": _STRING} for media_type in ASSET_TYPES.values()}
    asset = {"description": "The file", "content": files}
    paths = {
        "/v2/docs": {"get": _op("docs_page", "docs", "This API in Swagger UI", page)},
        f"/v2/docs/{SPEC_FILE}": {"get": _op("docs_spec", "docs", "This document", spec)},
        f"{ASSETS_PATH}/{{file}}": {
            "get": _op(
                "docs_asset",
                "docs",
                "Swagger UI's files",
                {"200": asset, "404": _answer("No such file", _ref("Error"))},
            )
        },
    }
    for prefix, suffix in zip(MODEL_PREFIXES, ("", "_version"), strict=True):
        summary = "A model's docs"
        paths[f"{prefix}/docs"] = {
            "get": _op(f"model_docs_page{suffix}", "docs", summary, page | _errors(404, 503))
        }
        paths[f"{prefix}/docs/{SPEC_FILE}"] = {
            "get": _op(f"model_docs_spec{suffix}", "docs", summary, spec | _errors(404, 503))
        }
    return paths


def _path_parameters(path: str) -> list[Schema]:
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
