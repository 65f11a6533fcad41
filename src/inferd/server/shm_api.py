"""The shared memory extension's REST routes: status, register, unregister.

Each handler translates its request to one call of
:class:`~inferd.serving.shared_memory.SharedMemoryOperations` (which the gRPC
servicer calls too) and the answer back to JSON; the operations, and what each
refuses, are there.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from inferd.errors import InvalidRequest
from inferd.server.rest.codec import JSON_CONTENT_TYPE, _decode
from inferd.serving.shared_memory import SharedMemoryOperations
from inferd.triton.shm import CUDA, SYSTEM

SYSTEM_PREFIX = "/v2/systemsharedmemory"
CUDA_PREFIX = "/v2/cudasharedmemory"


class SystemSharedMemoryRegisterBody(msgspec.Struct):
    """A region to register: ``byte_size`` bytes from ``offset`` of the POSIX shared
    memory object ``key`` (as shm_open names it, "/name")."""

    key: str
    byte_size: int
    offset: int = 0


class CudaRawHandle(msgspec.Struct):
    """Binary data in JSON, as Triton writes it: ``{"b64": "<base64>"}``."""

    b64: str


class CudaSharedMemoryRegisterBody(msgspec.Struct):
    """A region to register: ``byte_size`` bytes of the GPU memory that a CUDA IPC
    handle (cudaIpcMemHandle_t, 64 bytes) names, on device ``device_id``."""

    raw_handle: CudaRawHandle
    device_id: int
    byte_size: int


_register_decoder = msgspec.json.Decoder(SystemSharedMemoryRegisterBody)
_cuda_register_decoder = msgspec.json.Decoder(CudaSharedMemoryRegisterBody)
_EMPTY = b"{}"


def _json(content: bytes) -> Response:
    return Response(content, 200, media_type=JSON_CONTENT_TYPE)


class SharedMemoryEndpoints:
    """The REST handlers (routes.py names them), each one call of ``operations``."""

    def __init__(self, operations: SharedMemoryOperations, read_body: Any) -> None:
        self.operations = operations
        self.read_body = read_body

    async def shm_status(self, request: Request) -> Response:
        regions = self.operations.system_status(request.path_params.get("region"))
        return _json(msgspec.json.encode(regions))

    async def shm_register(self, request: Request) -> Response:
        self.operations.check_turned_on()  # off: 403 before the body is read
        body = await self.read_body(request)
        parsed = _decode(_register_decoder, body, "shared memory register request")
        await self.operations.register_system(
            request.path_params["region"], parsed.key, parsed.offset, parsed.byte_size
        )
        return _json(_EMPTY)

    async def shm_unregister(self, request: Request) -> Response:
        await self.operations.unregister(SYSTEM, request.path_params.get("region"))
        return _json(_EMPTY)

    async def cuda_shm_status(self, request: Request) -> Response:
        regions = self.operations.cuda_status(request.path_params.get("region"))
        return _json(msgspec.json.encode(regions))

    async def cuda_shm_register(self, request: Request) -> Response:
        self.operations.check_turned_on()  # off: 403 before the body is read
        body = await self.read_body(request)
        parsed = _decode(_cuda_register_decoder, body, "CUDA shared memory register request")
        await self.operations.register_cuda(
            request.path_params["region"],
            _base64(parsed.raw_handle.b64),
            parsed.device_id,
            parsed.byte_size,
        )
        return _json(_EMPTY)

    async def cuda_shm_unregister(self, request: Request) -> Response:
        await self.operations.unregister(CUDA, request.path_params.get("region"))
        return _json(_EMPTY)


def _base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("raw_handle.b64 is not base64") from None
