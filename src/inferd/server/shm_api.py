"""The shared memory extension's API over REST and gRPC: status, register, unregister.

System and CUDA shared memory regions live in the DataPlane's one
:class:`~inferd.triton.shm.SharedMemoryRegistry` (None while ``shared_memory_enabled`` is
false: as in Triton without the extension, the status calls then list no region,
and register and unregister are refused with 403 / PERMISSION_DENIED, saying how to
turn it on). Registering CUDA memory where the server has no GPU answers 400 /
INVALID_ARGUMENT saying so (shm_cuda.py); its status and unregister calls work
anywhere, as clients clear both kinds before they start.

Registering and unregistering hold server-wide: they go through the
:class:`~inferd.serving.server_wide.ServerWide` the edge was given, so a region
registered through one protocol process is there in every one; the status is read
in the process asked.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec
import orjson
from starlette.requests import Request
from starlette.responses import Response

from inferd.errors import InvalidRequest
from inferd.protocol import pb
from inferd.server.rest.codec import JSON_CONTENT_TYPE, _decode
from inferd.serving.dataplane import DataPlane
from inferd.serving.server_wide import ServerWide, shared_memory_of
from inferd.triton.shm import CUDA, SYSTEM, SharedMemoryRegistry

SYSTEM_PREFIX = "/v2/systemsharedmemory"
CUDA_PREFIX = "/v2/cudasharedmemory"


class SystemSharedMemoryRegisterBody(msgspec.Struct):
    """A region to register: ``byte_size`` bytes from ``offset`` of the POSIX shared
    memory object ``key`` (as shm_open names it, "/name")."""

    key: str
    byte_size: int
    offset: int = 0


class SystemSharedMemoryRegionBody(msgspec.Struct):
    name: str
    key: str
    offset: int
    byte_size: int


class CudaRawHandle(msgspec.Struct):
    """Binary data in JSON, as Triton writes it: ``{"b64": "<base64>"}``."""

    b64: str


class CudaSharedMemoryRegisterBody(msgspec.Struct):
    """A region to register: ``byte_size`` bytes of the GPU memory that a CUDA IPC
    handle (cudaIpcMemHandle_t, 64 bytes) names, on device ``device_id``."""

    raw_handle: CudaRawHandle
    device_id: int
    byte_size: int


class CudaSharedMemoryRegionBody(msgspec.Struct):
    name: str
    device_id: int
    byte_size: int


_register_decoder = msgspec.json.Decoder(SystemSharedMemoryRegisterBody)
_cuda_register_decoder = msgspec.json.Decoder(CudaSharedMemoryRegisterBody)


# What the status calls read while the extension is off: no region.
_NONE_REGISTERED = SharedMemoryRegistry()


def _listed(dataplane: DataPlane) -> SharedMemoryRegistry:
    """The regions the status calls list: none while the extension is off (as Triton)."""
    regions = dataplane.shared_memory
    return regions if regions is not None else _NONE_REGISTERED


def _json(content: Any) -> Response:
    return Response(orjson.dumps(content), 200, media_type=JSON_CONTENT_TYPE)


class SharedMemoryEndpoints:
    """The REST handlers (routes.py names them): the status from one DataPlane,
    changes through ``server_wide``."""

    def __init__(self, dataplane: DataPlane, server_wide: ServerWide, read_body: Any) -> None:
        self.dataplane = dataplane
        self.server_wide = server_wide
        self.read_body = read_body

    async def shm_status(self, request: Request) -> Response:
        region = request.path_params.get("region")
        return _json(_listed(self.dataplane).status(region, SYSTEM))

    async def shm_register(self, request: Request) -> Response:
        shared_memory_of(self.dataplane)  # off: 403 before the body is read, as before
        body = await self.read_body(request)
        parsed = _decode(_register_decoder, body, "shared memory register request")
        await self.server_wide.register_system_memory(
            request.path_params["region"], parsed.key, parsed.offset, parsed.byte_size
        )
        return _json({})

    async def shm_unregister(self, request: Request) -> Response:
        await self.server_wide.unregister_memory(request.path_params.get("region"), SYSTEM)
        return _json({})

    async def cuda_shm_status(self, request: Request) -> Response:
        region = request.path_params.get("region")
        return _json(_listed(self.dataplane).status(region, CUDA))

    async def cuda_shm_register(self, request: Request) -> Response:
        shared_memory_of(self.dataplane)  # off: 403 before the body is read, as before
        body = await self.read_body(request)
        parsed = _decode(_cuda_register_decoder, body, "CUDA shared memory register request")
        handle = _base64(parsed.raw_handle.b64)
        await self.server_wide.register_cuda_memory(
            request.path_params["region"], handle, parsed.device_id, parsed.byte_size
        )
        return _json({})

    async def cuda_shm_unregister(self, request: Request) -> Response:
        await self.server_wide.unregister_memory(request.path_params.get("region"), CUDA)
        return _json({})


def _base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("raw_handle.b64 is not base64") from None


# ---- gRPC ----


def grpc_status(dataplane: DataPlane, name: str) -> pb.SystemSharedMemoryStatusResponse:
    answer = pb.SystemSharedMemoryStatusResponse()
    _fill_status(answer, _listed(dataplane).status(name, SYSTEM))
    return answer


def _fill_status(answer: Any, regions: list[dict[str, Any]]) -> None:
    """A status answer (system or CUDA: the same map of regions) holding ``regions``."""
    for region in regions:
        answer.regions[region["name"]].CopyFrom(type(answer).RegionStatus(**region))


async def grpc_register(
    server_wide: ServerWide, request: pb.SystemSharedMemoryRegisterRequest
) -> pb.SystemSharedMemoryRegisterResponse:
    await server_wide.register_system_memory(
        request.name, request.key, request.offset, request.byte_size
    )
    return pb.SystemSharedMemoryRegisterResponse()


async def grpc_unregister(
    server_wide: ServerWide, name: str
) -> pb.SystemSharedMemoryUnregisterResponse:
    await server_wide.unregister_memory(name, SYSTEM)
    return pb.SystemSharedMemoryUnregisterResponse()


def grpc_cuda_status(dataplane: DataPlane, name: str) -> pb.CudaSharedMemoryStatusResponse:
    answer = pb.CudaSharedMemoryStatusResponse()
    _fill_status(answer, _listed(dataplane).status(name, CUDA))
    return answer


async def grpc_cuda_register(
    server_wide: ServerWide, request: pb.CudaSharedMemoryRegisterRequest
) -> pb.CudaSharedMemoryRegisterResponse:
    await server_wide.register_cuda_memory(
        request.name, request.raw_handle, request.device_id, request.byte_size
    )
    return pb.CudaSharedMemoryRegisterResponse()


async def grpc_cuda_unregister(
    server_wide: ServerWide, name: str
) -> pb.CudaSharedMemoryUnregisterResponse:
    await server_wide.unregister_memory(name, CUDA)
    return pb.CudaSharedMemoryUnregisterResponse()
