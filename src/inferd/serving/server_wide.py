"""Operations that act on the whole server, not on the process that takes them.

Both edges call these through one :class:`ServerWide` object: a repository load
(with Triton's configuration override) or unload, a change of the log settings,
a shared memory region registered or unregistered (system or CUDA), and a
statistics read. A lone server applies them to its own DataPlane
(:class:`LocalServerWide`, what the edges did before); a protocol process among
several (``protocol_processes`` > 1) is given one that forwards them to the
supervisor's coordinator (``supervisor/forwarding.py``), which applies them in
every protocol process, so that what a client sees does not depend on which
process took its connection.

Every operation raises what the local one raises (InferdError and its codes),
whichever object answers it, so both edges' error mappers answer the same.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from inferd.errors import PermissionDenied
from inferd.serving.dataplane import DataPlane
from inferd.triton.shm import TURNED_OFF, SharedMemoryRegistry

# The load parameters (REST: ``{"parameters": {"load_on_request": true, "evict":
# "m3"}}``) of a load that a request's first use makes: unpinned, a no-op where the
# model is loaded, evicting ``evict`` first (the requesting process's choice) if the
# budget is full.
LOAD_ON_REQUEST = "load_on_request"
EVICT = "evict"


class ServerWide(Protocol):
    """What the edges call for an operation that holds server-wide."""

    async def load(self, name: str, config: str | None) -> None:
        """(Re)load ``name`` from the repository, with the JSON override ``config``."""
        ...

    async def load_on_request(self, name: str, evict: str | None = None) -> None:
        """Load ``name`` as a request's first use does (load_on_request: unpinned,
        under max_loaded_models, making room by evicting ``evict`` if it may), unless
        it is loaded already."""
        ...

    async def unload(self, name: str) -> None: ...

    async def change_log_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply ``changes`` (Triton's fields); the settings then in force."""
        ...

    async def register_system_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None: ...

    async def register_cuda_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None: ...

    async def unregister_memory(self, name: str | None, kind: str) -> None:
        """Unregister region ``name`` of ``kind``, or every one of that kind (None)."""
        ...

    async def statistics(self, name: str | None, version: str | None) -> list[dict[str, Any]]:
        """Triton's ``ModelStatistics`` (as JSON) of every model, of ``name``, or of
        one version of it."""
        ...


def load_on_request_of(body: bytes) -> tuple[bool, str | None]:
    """Whether a REST load body sets the ``load_on_request`` parameter (to true), and
    the ``evict`` it names (None: none)."""
    try:
        parameters = orjson.loads(body or b"{}").get("parameters")
    except (orjson.JSONDecodeError, AttributeError):
        return False, None  # the load's own decoding says what is wrong with it
    if not isinstance(parameters, dict) or parameters.get(LOAD_ON_REQUEST) is not True:
        return False, None
    evict = parameters.get(EVICT)
    return True, evict if isinstance(evict, str) else None


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

    async def load(self, name: str, config: str | None) -> None:
        await self.dataplane.load(name, config)

    async def load_on_request(self, name: str, evict: str | None = None) -> None:
        await self.dataplane.load_on_request(name, evict)

    async def unload(self, name: str) -> None:
        await self.dataplane.unload(name)

    async def change_log_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        return self.dataplane.log_settings(changes)

    async def register_system_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        shared_memory_of(self.dataplane).register(name, key, offset, byte_size)

    async def register_cuda_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        shared_memory_of(self.dataplane).register_cuda(name, raw_handle, device_id, byte_size)

    async def unregister_memory(self, name: str | None, kind: str) -> None:
        shared_memory_of(self.dataplane).unregister(name, kind)

    async def statistics(self, name: str | None, version: str | None) -> list[dict[str, Any]]:
        return [stats.to_dict() for stats in self.dataplane.statistics(name, version)]
