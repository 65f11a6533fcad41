"""The OpenAPI operations of the shared memory extension's routes (server/rest/shm_api.py)."""

from __future__ import annotations

from inferd.server.docs.operations import Schema, _answer, _op, _ref
from inferd.server.rest.codec import JSON_CONTENT_TYPE

_ERRORS = {
    "400": _answer(
        "The request is malformed, or the key or region cannot be used (the message says why)",
        _ref("Error"),
    ),
    "403": _answer(
        "Shared memory is turned off on this server (shared_memory_enabled: false)",
        _ref("Error"),
    ),
}
_CUDA_ERROR = {"400": _answer("CUDA shared memory is not supported", _ref("Error"))}
_REGIONS = {"type": "array", "items": _ref("SystemSharedMemoryRegion")}


def _status(operation_id: str, example: Schema) -> Schema:
    ok = {"200": _answer("The registered regions (the one named)", _REGIONS)}
    return _op(operation_id, "shared-memory", "System shared memory status", ok | _ERRORS)


def _register(operation_id: str, example: Schema) -> Schema:
    body = {
        "required": True,
        "content": {JSON_CONTENT_TYPE: {"schema": _ref("SystemSharedMemoryRegister")}},
    }
    ok = {"200": _answer("Registered", _ref("Empty"))}
    return _op(
        operation_id,
        "shared-memory",
        "Register a system shared memory region",
        ok | _ERRORS,
        requestBody=body,
    )


def _unregister(operation_id: str, example: Schema) -> Schema:
    ok = {"200": _answer("Unregistered (every region, when none is named)", _ref("Empty"))}
    return _op(operation_id, "shared-memory", "Unregister system shared memory", ok | _ERRORS)


def _cuda(operation_id: str, example: Schema) -> Schema:
    return _op(operation_id, "shared-memory", "CUDA shared memory (not supported)", _CUDA_ERROR)


SHARED_MEMORY_OPERATIONS = {
    "system_shared_memory_status": _status,
    "system_shared_memory_region_status": _status,
    "system_shared_memory_register": _register,
    "system_shared_memory_unregister": _unregister,
    "system_shared_memory_region_unregister": _unregister,
    "cuda_shared_memory_status": _cuda,
    "cuda_shared_memory_region_status": _cuda,
    "cuda_shared_memory_register": _cuda,
    "cuda_shared_memory_unregister": _cuda,
    "cuda_shared_memory_region_unregister": _cuda,
}
