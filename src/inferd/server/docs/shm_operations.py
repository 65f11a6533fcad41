"""The OpenAPI operations of the shared memory extension's routes (server/rest/shm_api.py)."""

from __future__ import annotations

from inferd.server.docs.parts import Schema, answer, op, ref
from inferd.server.rest.codec import JSON_CONTENT_TYPE

_ERRORS = {
    "400": answer(
        "The request is malformed, or the key or region cannot be used (the message says why)",
        ref("Error"),
    ),
    "403": answer(
        "Shared memory is turned off on this server (shared_memory_enabled: false)",
        ref("Error"),
    ),
}
_CUDA_ERROR = {"400": answer("CUDA shared memory is not supported", ref("Error"))}
_REGIONS = {"type": "array", "items": ref("SystemSharedMemoryRegion")}


def _status(operation_id: str, example: Schema) -> Schema:
    ok = {"200": answer("The registered regions (the one named)", _REGIONS)}
    return op(operation_id, "shared-memory", "System shared memory status", ok | _ERRORS)


def _register(operation_id: str, example: Schema) -> Schema:
    body = {
        "required": True,
        "content": {JSON_CONTENT_TYPE: {"schema": ref("SystemSharedMemoryRegister")}},
    }
    ok = {"200": answer("Registered", ref("Empty"))}
    return op(
        operation_id,
        "shared-memory",
        "Register a system shared memory region",
        ok | _ERRORS,
        requestBody=body,
    )


def _unregister(operation_id: str, example: Schema) -> Schema:
    ok = {"200": answer("Unregistered (every region, when none is named)", ref("Empty"))}
    return op(operation_id, "shared-memory", "Unregister system shared memory", ok | _ERRORS)


def _cuda(operation_id: str, example: Schema) -> Schema:
    return op(operation_id, "shared-memory", "CUDA shared memory (not supported)", _CUDA_ERROR)


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
