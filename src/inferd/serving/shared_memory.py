"""The shared memory extension's operations, each written once for both edges.

Status, register and unregister of system and CUDA shared memory regions, in
plain arguments: the REST handlers (``server/shm_api.py``) and the gRPC servicer
translate their wire to these calls and their answers back, nothing more.

The regions live in the DataPlane's one :class:`~inferd.triton.shm.SharedMemoryRegistry`
(None while ``shared_memory_enabled`` is false: as in Triton without the extension,
the status calls then list no region, and register and unregister raise
PermissionDenied, saying how to turn it on). Registering CUDA memory where the
server has no GPU raises InvalidRequest saying so (shm_cuda.py); its status and
unregister work anywhere, as clients clear both kinds before they start.

Registering and unregistering hold server-wide: they go through the
:class:`~inferd.serving.server_wide.ServerWide` given, so a region registered
through one protocol process is there in every one; the status is read in the
process asked.
"""

from __future__ import annotations

from typing import Any

import msgspec

from inferd.serving.dataplane import DataPlane
from inferd.serving.server_wide import ServerWide, shared_memory_of
from inferd.triton.shm import CUDA, SYSTEM, SharedMemoryRegistry

# The status of a region, as both edges answer it. (No docstrings: the OpenAPI
# document shows these Structs as they were, without descriptions.)


class SystemSharedMemoryRegion(msgspec.Struct):
    name: str
    key: str
    offset: int
    byte_size: int


class CudaSharedMemoryRegion(msgspec.Struct):
    name: str
    device_id: int
    byte_size: int


# What the status calls read while the extension is off: no region.
_NONE_REGISTERED = SharedMemoryRegistry()


class SharedMemoryOperations:
    """The extension's operations: the status read from ``dataplane``, the changes
    made through ``server_wide``. Each raises inferd's errors (InferdError)."""

    def __init__(self, dataplane: DataPlane, server_wide: ServerWide) -> None:
        self.dataplane = dataplane
        self.server_wide = server_wide

    def system_status(self, name: str | None) -> list[SystemSharedMemoryRegion]:
        """The system regions, or the one named (RegionNotFound if it is not one)."""
        return [SystemSharedMemoryRegion(**region) for region in self._listed(name, SYSTEM)]

    def cuda_status(self, name: str | None) -> list[CudaSharedMemoryRegion]:
        """The CUDA regions, or the one named (RegionNotFound if it is not one)."""
        return [CudaSharedMemoryRegion(**region) for region in self._listed(name, CUDA)]

    def check_turned_on(self) -> None:
        """PermissionDenied while the extension is off: a register checks it before
        anything else (the REST edge before it reads the body)."""
        shared_memory_of(self.dataplane)

    async def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes from ``offset`` of the POSIX shared memory
        object ``key`` (as shm_open names it, "/name") as region ``name``."""
        self.check_turned_on()
        await self.server_wide.register_system_memory(name, key, offset, byte_size)

    async def register_cuda(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        """Register ``byte_size`` bytes of the GPU memory that a CUDA IPC handle
        (cudaIpcMemHandle_t, 64 bytes) names, on device ``device_id``."""
        self.check_turned_on()
        await self.server_wide.register_cuda_memory(name, raw_handle, device_id, byte_size)

    async def unregister(self, kind: str, name: str | None) -> None:
        """Unregister region ``name`` of ``kind`` (SYSTEM or CUDA), or all of that
        kind (None or "")."""
        await self.server_wide.unregister_memory(name, kind)

    def _listed(self, name: str | None, kind: str) -> list[dict[str, Any]]:
        """The regions a status call lists: none while the extension is off (as Triton)."""
        regions = self.dataplane.shared_memory
        return (regions if regions is not None else _NONE_REGISTERED).status(name, kind)
