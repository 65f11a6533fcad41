"""Operations that act on the whole server, not on the process that takes them.

Both edges call these through one :class:`ServerWide` object: a repository load
(with Triton's configuration override) or unload, a change of the log settings,
a shared memory region registered or unregistered (system or CUDA), and a
statistics read. Each method builds the operation's typed message
(``serving/operations.py``) and hands it to :meth:`ServerWide.apply`: a lone
server applies it to its own DataPlane (:class:`LocalServerWide`); a protocol
process among several (``protocol_processes`` > 1) is given one that sends the
message to the supervisor's coordinator (``supervisor/forwarding.py``), which has
every protocol process apply it with its own LocalServerWide, so that what a
client sees does not depend on which process took its connection.

Every operation raises what the local one raises (InferdError and its codes),
whichever object answers it, so both edges' error mappers answer the same.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from inferd.errors import PermissionDenied
from inferd.serving.dataplane import DataPlane
from inferd.serving.operations import (
    ChangeLogSettings,
    ChangeTraceSettings,
    DropMemory,
    Load,
    LoadOnRequest,
    Operation,
    ReadStatistics,
    RegisterCudaMemory,
    RegisterSystemMemory,
    Unload,
    UnregisterMemory,
)
from inferd.triton.shm import TURNED_OFF, SharedMemoryRegistry


class ServerWide(ABC):
    """What the edges call for an operation that holds server-wide."""

    @abstractmethod
    async def apply(self, operation: Operation) -> Any:
        """``operation`` applied where this object applies it; its value."""

    async def load(self, name: str, config: str | None) -> None:
        """(Re)load ``name`` from the repository, with the JSON override ``config``."""
        await self.apply(Load(name, config))

    async def load_on_request(self, name: str, evict: str | None = None) -> None:
        """Load ``name`` as a request's first use does (load_on_request: unpinned,
        under max_loaded_models, making room by evicting ``evict`` if it may), unless
        it is loaded already."""
        await self.apply(LoadOnRequest(name, evict))

    async def unload(self, name: str) -> None:
        await self.apply(Unload(name))

    async def change_log_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply ``changes`` (Triton's fields); the settings then in force."""
        settings: dict[str, Any] = await self.apply(ChangeLogSettings(changes))
        return settings

    async def change_trace_settings(self, model: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply ``changes`` (checked Triton trace settings) to ``model``'s ("": the
        server's); the settings then in force, as Triton answers them."""
        value: dict[str, Any] = await self.apply(ChangeTraceSettings(model, changes))
        settings: dict[str, Any] = value["settings"]
        return settings

    async def register_system_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        await self.apply(RegisterSystemMemory(name, key, offset, byte_size))

    async def register_cuda_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self.apply(RegisterCudaMemory(name, raw_handle, device_id, byte_size))

    async def unregister_memory(self, name: str | None, kind: str, drained: bool = False) -> None:
        """Unregister region ``name`` of ``kind``, or every one of that kind (None): as
        Triton, a region a request still uses (in any process) stays until its last
        holder lets go (``drained``: one has; its process asks again)."""
        held: list[str] = await self.apply(UnregisterMemory(kind, name, drained))
        if name is None or name not in held:
            await self.apply(DropMemory(kind, name, held))

    async def statistics(self, name: str | None, version: str | None) -> list[dict[str, Any]]:
        """Triton's ``ModelStatistics`` (as JSON) of every model, of ``name``, or of
        one version of it."""
        stats: list[dict[str, Any]] = await self.apply(ReadStatistics(name, version))
        return stats


def shared_memory_of(dataplane: DataPlane) -> SharedMemoryRegistry:
    """The server's regions; PermissionDenied while the extension is off."""
    if dataplane.shared_memory is None:
        raise PermissionDenied(TURNED_OFF)
    return dataplane.shared_memory


class LocalServerWide(ServerWide):
    """Server-wide operations applied to one DataPlane: the whole server when it is
    the only process, or this process's share when the coordinator fans them out."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane

    async def apply(self, operation: Operation) -> Any:
        dataplane = self.dataplane
        match operation:
            case Load(name, config):
                await dataplane.load(name, config)
            case LoadOnRequest(name, evict):
                await dataplane.load_on_request(name, evict)
            case Unload(name):
                await dataplane.unload(name)
            case ChangeLogSettings(changes):
                return dataplane.log_settings(changes)
            case ChangeTraceSettings(model, changes, whole):
                traces = dataplane.trace_settings
                traces.change(model, changes, whole)
                return {"settings": traces.answer(model), "set": traces.fields_set(model)}
            case RegisterSystemMemory(name, key, offset, byte_size):
                shared_memory_of(dataplane).register(name, key, offset, byte_size)
            case RegisterCudaMemory(name, raw_handle, device_id, byte_size):
                shared_memory_of(dataplane).register_cuda(name, raw_handle, device_id, byte_size)
            case UnregisterMemory(kind, name, drained):
                return shared_memory_of(dataplane).mark_unregistered(name, kind, drained)
            case DropMemory(kind, name, keep):
                shared_memory_of(dataplane).drop(name, kind, keep)
            case ReadStatistics(name, version):
                return [stats.to_dict() for stats in dataplane.statistics(name, version)]
            case _:
                raise TypeError(f"{type(operation).__name__} is not applied by a data plane")
        return None
