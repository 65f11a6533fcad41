"""The OpenAPI 3.1 document of the V2 REST API (served by server/docs/pages.py).

The schemas are generated (``msgspec.json.schema_components``) from the Structs
the server decodes requests with (server/rest/codec.py) and the Structs that
describe its answers (server/rest/responses.py), so the document follows the code
instead of drifting from it; only prose and the checks the decoder makes after
msgspec (_REFINEMENTS) are added here, and a field they name that went away fails
loudly.
The paths are routes.API_ROUTES, each documented by server/docs/operations.py.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any
from urllib.parse import quote

import msgspec

from inferd.server.docs.docs_operations import DOCS_OPERATIONS
from inferd.server.docs.openai_operations import OPENAI_OPERATIONS
from inferd.server.docs.operations import operation as _v2_operation
from inferd.server.docs.operations import path_parameters
from inferd.server.docs.parts import REF, Schema
from inferd.server.docs.shm_operations import SHARED_MEMORY_OPERATIONS
from inferd.server.openai.wire import ChatCompletionBody, CompletionBody, EmbeddingBody
from inferd.server.rest import codec as bodies
from inferd.server.rest import responses
from inferd.server.rest.codec_generate import GenerateRequestBody, GenerateResponseBody
from inferd.server.routes import API_ROUTES, MODEL_DOCUMENT_OPERATIONS, MODEL_PREFIX, ApiRoute
from inferd.server.shm_api import CudaSharedMemoryRegisterBody, SystemSharedMemoryRegisterBody
from inferd.serving.shared_memory import CudaSharedMemoryRegion, SystemSharedMemoryRegion
from inferd.tensors.datatypes import DATATYPES
from inferd.types import MetadataTensor, ModelMetadata, ServerMetadata

OPENAPI_VERSION = "3.1.0"

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
    responses.InferenceResponseBody,
    responses.ModelMetadataBody,
    responses.ServerMetadataBody,
    responses.LiveBody,
    responses.ReadyBody,
    responses.ModelReadyBody,
    responses.RepositoryIndexEntryBody,
    responses.EmptyBody,
    responses.ErrorBody,
    responses.ModelStatisticsResponseBody,
    GenerateRequestBody,
    GenerateResponseBody,
    SystemSharedMemoryRegisterBody,
    SystemSharedMemoryRegion,
    CudaSharedMemoryRegisterBody,
    CudaSharedMemoryRegion,
    CompletionBody,
    ChatCompletionBody,
    EmbeddingBody,
)
# What the decoder's own checks add to the Structs' types
# (tensors/datatypes.py, encoding.check_shape).
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
        "(binary tensor extension); content_type: how the model decodes it (np, str, ...); "
        "shared_memory_region, shared_memory_offset, shared_memory_byte_size: where it is "
        "in a registered system or CUDA shared memory region (then no data)",
    },
    ("RequestOutput", "parameters"): {
        "description": "binary_data: true sends this output as raw bytes after the JSON "
        "header; shared_memory_region, shared_memory_offset, shared_memory_byte_size: "
        "write it into a registered system or CUDA shared memory region instead",
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

_GENERIC_EXAMPLE = {
    "inputs": [
        {"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}
    ]
}


def operation(route: ApiRoute, example: Schema) -> Schema:
    """The OpenAPI operation of ``route``."""
    builder = (
        SHARED_MEMORY_OPERATIONS.get(route.operation)
        or DOCS_OPERATIONS.get(route.operation)
        or OPENAI_OPERATIONS.get(route.operation)
    )
    if builder is not None:
        return builder(route.operation_id, example)
    return _v2_operation(route, example)


@functools.cache
def components() -> dict[str, Schema]:
    """The schemas of every documented body, under their public names."""
    _, raw = msgspec.json.schema_components(_DOCUMENTED_STRUCTS, ref_template=REF)
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
        copied["$ref"] = REF.format(name=names[copied["$ref"].rsplit("/", 1)[1]])
    return copied


# ---- The documents ----


def api_document(server: ServerMetadata, root_path: str) -> Schema:
    """The whole V2 REST API: every route of routes.API_ROUTES."""
    paths: dict[str, Schema] = {}
    for route in API_ROUTES:
        item = paths.setdefault(route.path, {})
        item[route.method.lower()] = operation(route, _GENERIC_EXAMPLE)
        parameters = path_parameters(route.path)
        if parameters:
            item["parameters"] = parameters
    description = (
        "The Open Inference Protocol (KServe V2) over REST. Errors are "
        '`{"error": "<what was wrong>"}`. Every model route also exists under '
        "/v2/models/{name}/versions/{version}; without a version the default one answers. "
        "Each model has its own docs at /v2/models/{name}/docs. The streaming routes "
        "(infer_stream, generate_stream) answer text/event-stream."
    )
    info = {"title": f"{server.name} V2 inference API", "version": server.version}
    return _document(info | {"description": description}, paths, root_path)


def model_document(metadata: ModelMetadata, version: str | None, root_path: str) -> Schema:
    """The routes of one model (or model version), with an example request for it."""
    prefix = model_prefix(metadata.name, version)
    example = example_request(metadata)
    paths: dict[str, Schema] = {}
    for route in API_ROUTES:
        if route.operation_id in MODEL_DOCUMENT_OPERATIONS:
            path = prefix + route.path.removeprefix(MODEL_PREFIX)
            paths.setdefault(path, {})[route.method.lower()] = operation(route, example)
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
