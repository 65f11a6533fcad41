"""The shared memory extension's API over REST and gRPC: status, register, unregister.

System shared memory regions live in the DataPlane's
:class:`~inferd.triton.shm.SharedMemoryRegistry` (None while ``shared_memory_enabled`` is
false: every call is then refused with 403 / PERMISSION_DENIED, saying how to turn
it on). CUDA shared memory is not supported: its calls answer 400 /
INVALID_ARGUMENT saying so, so a Triton client learns it at once.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
from starlette.requests import Request
from starlette.responses import Response

from inferd.errors import InvalidRequest, PermissionDenied
from inferd.protocol import pb
from inferd.server.rest.codec import JSON_CONTENT_TYPE, _decode
from inferd.serving.dataplane import DataPlane
from inferd.triton.shm import CUDA_NOT_SUPPORTED, TURNED_OFF, SharedMemoryRegistry

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


_register_decoder = msgspec.json.Decoder(SystemSharedMemoryRegisterBody)


def registry_of(dataplane: DataPlane) -> SharedMemoryRegistry:
    """The server's regions; PermissionDenied while the extension is off."""
    if dataplane.shared_memory is None:
        raise PermissionDenied(TURNED_OFF)
    return dataplane.shared_memory


def _json(content: Any) -> Response:
    return Response(orjson.dumps(content), 200, media_type=JSON_CONTENT_TYPE)


class SharedMemoryEndpoints:
    """The REST handlers (routes.py names them), bound to one DataPlane."""

    def __init__(self, dataplane: DataPlane, read_body: Any) -> None:
        self.dataplane = dataplane
        self.read_body = read_body

    async def shm_status(self, request: Request) -> Response:
        region = request.path_params.get("region")
        return _json(registry_of(self.dataplane).status(region))

    async def shm_register(self, request: Request) -> Response:
        regions = registry_of(self.dataplane)
        body = await self.read_body(request)
        parsed = _decode(_register_decoder, body, "shared memory register request")
        regions.register(request.path_params["region"], parsed.key, parsed.offset, parsed.byte_size)
        return _json({})

    async def shm_unregister(self, request: Request) -> Response:
        registry_of(self.dataplane).unregister(request.path_params.get("region"))
        return _json({})

    async def cuda_shm(self, request: Request) -> Response:
        raise InvalidRequest(CUDA_NOT_SUPPORTED)


# ---- gRPC ----


def grpc_status(dataplane: DataPlane, name: str) -> pb.SystemSharedMemoryStatusResponse:
    answer = pb.SystemSharedMemoryStatusResponse()
    for region in registry_of(dataplane).status(name):
        answer.regions[region["name"]].CopyFrom(
            pb.SystemSharedMemoryStatusResponse.RegionStatus(**region)
        )
    return answer


def grpc_register(dataplane: DataPlane, request: pb.SystemSharedMemoryRegisterRequest) -> None:
    registry_of(dataplane).register(request.name, request.key, request.offset, request.byte_size)
