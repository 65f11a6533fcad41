"""The OpenAPI operations of the shared memory extension's routes (server/shm_api.py)."""

from __future__ import annotations

from collections.abc import Callable

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
_NOT_FOUND = {"404": answer("No region of this kind has that name", ref("Error"))}
_CUDA_ERRORS = _ERRORS | {
    "400": answer(
        "The request is malformed, the handle cannot be opened, or this server has no GPU "
        "(no CUDA runtime or no device: the message says which)",
        ref("Error"),
    )
}
_TITLES = {"system": "System shared memory", "cuda": "CUDA shared memory"}
_REGISTER_SUMMARIES = {
    "system": "Register a system shared memory region",
    "cuda": "Register a CUDA shared memory region (a CUDA IPC handle)",
}
Operation = Callable[[str, Schema], Schema]


def _operations(kind: str, component: str) -> dict[str, Operation]:
    """status, register and unregister of one kind ("system" or "cuda"), whose
    components are ``<component>Register`` and ``<component>Region``."""
    errors = _CUDA_ERRORS if kind == "cuda" else _ERRORS
    regions = {"type": "array", "items": ref(f"{component}Region")}
    body = {
        "required": True,
        "content": {JSON_CONTENT_TYPE: {"schema": ref(f"{component}Register")}},
    }

    def status(operation_id: str, example: Schema) -> Schema:
        ok = {"200": answer("The registered regions (the one named)", regions)}
        answers = ok | _ERRORS | _NOT_FOUND
        return op(operation_id, "shared-memory", f"{_TITLES[kind]} status", answers)

    def register(operation_id: str, example: Schema) -> Schema:
        ok = {"200": answer("Registered", ref("Empty"))}
        summary = _REGISTER_SUMMARIES[kind]
        return op(operation_id, "shared-memory", summary, ok | errors, requestBody=body)

    def unregister(operation_id: str, example: Schema) -> Schema:
        ok = {"200": answer("Unregistered (every region, when none is named)", ref("Empty"))}
        summary = f"Unregister {_TITLES[kind]}"
        return op(operation_id, "shared-memory", summary, ok | _ERRORS)

    prefix = f"{kind}_shared_memory"
    return {
        f"{prefix}_status": status,
        f"{prefix}_region_status": status,
        f"{prefix}_register": register,
        f"{prefix}_unregister": unregister,
        f"{prefix}_region_unregister": unregister,
    }


SHARED_MEMORY_OPERATIONS = _operations("system", "SystemSharedMemory") | _operations(
    "cuda", "CudaSharedMemory"
)
