"""Triton's shared memory extension: regions of system or CUDA shared memory, by name.

A client on the same host registers a region under a name, then passes inputs and
receives outputs by reference: the parameters ``shared_memory_region``,
``shared_memory_offset`` and ``shared_memory_byte_size`` on an input or a requested
output replace the tensor's data on the wire.

Two kinds of region share one registry and one namespace, as in Triton: system
regions (a POSIX shared memory object, :mod:`inferd.triton.shm_system`) and CUDA regions
(GPU memory a client shares by IPC handle, :mod:`inferd.triton.shm_cuda`). Both live in
the main process, which checks every use against the region's bounds and writes
every output. A request names a region without saying its kind; status and
unregister act on one kind, as the extension's two APIs do.

A request holds the regions it uses (:class:`RegionClaim`) from its decoding until
its outputs are written. Unregistering a held region only marks it, as Triton does:
it stays listed, usable, and its name taken, until its last holder lets go; then
it goes (``on_drained``: through the server-wide operations, so that a region
drains in every protocol process before any drops it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from inferd.errors import ErrorCode, InferdError, InvalidRequest
from inferd.tensors.datatypes import element_count, numpy_dtype
from inferd.tensors.encoding import array_from_bytes, array_to_bytes, check_shape
from inferd.triton.shm_cuda import CudaBackend, CudaMemory, cuda_backend
from inferd.triton.shm_system import Mapping, object_name, remember

REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"
PARAMETERS = (REGION, OFFSET, BYTE_SIZE)
SYSTEM = "system"
CUDA = "cuda"
_KIND_NAMES = {SYSTEM: "system shared memory", CUDA: "CUDA shared memory"}

TURNED_OFF = (
    "Shared memory (system and CUDA) is turned off on this server: set "
    "shared_memory_enabled: true (INFERD_SHARED_MEMORY_ENABLED=true) to use it"
)


class RegionNotFound(InferdError):
    """A status call named no region of its kind (Triton answers NOT_FOUND too)."""

    code = ErrorCode.NOT_FOUND


class RegionMemory(Protocol):
    """The memory behind a region: a system object's mapping or a CUDA allocation."""

    def check(self, what: str) -> None:
        """InvalidRequest if the memory cannot be used any more."""
        ...

    def read(self, start: int, size: int) -> np.ndarray:
        """``size`` bytes from ``start`` as a read-only uint8 array."""
        ...

    def write(self, start: int, raw: np.ndarray) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class Region:
    """A registered region: ``byte_size`` bytes from ``offset`` of its memory."""

    name: str
    kind: str
    offset: int
    byte_size: int
    memory: RegionMemory
    details: dict[str, Any]  # what its status shows besides the name and byte size
    holders: int = 0  # the requests of this process that use it now
    unregistered: bool = False  # unregistered while held: goes when its holders let go

    def span(self, offset: int, size: int, what: str) -> int:
        """Where ``size`` bytes at ``offset`` of the region start in its memory;
        InvalidRequest naming the region if they do not lie inside it."""
        if offset < 0 or size < 0 or offset + size > self.byte_size:
            # Triton's words first (scripts match on them), then which bytes did not fit.
            problem = "offset" if not 0 <= offset < self.byte_size else "offset + byte size"
            raise InvalidRequest(
                f"Invalid {problem} for shared memory region: '{self.name}' ({what}: "
                f"{size} bytes at offset {offset} do not fit in its {self.byte_size} bytes)"
            )
        self.memory.check(what)
        return self.offset + offset

    def status(self) -> dict[str, Any]:
        return {"name": self.name, **self.details, "byte_size": self.byte_size}


class SharedMemoryRegistry:
    """The regions clients registered, by name; one per server (REST and gRPC share it).

    ``cuda`` gives the CUDA runtime, asked for at the first CUDA register.
    ``on_drained(name, kind)`` is called when the last holder of an unregistered
    region lets go (None: the region is dropped at once)."""

    def __init__(
        self, key_prefix: str | None = None, cuda: Callable[[], CudaBackend] = cuda_backend
    ) -> None:
        self.key_prefix = object_name(key_prefix) if key_prefix else None
        self._cuda = cuda
        self._regions: dict[str, Region] = {}
        self.on_drained: Callable[[str, str], None] | None = None

    def claim(self) -> RegionClaim:
        """What a request looks its regions up through, holding each it finds."""
        return RegionClaim(self)

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes from ``offset`` of the system shared memory
        object ``key`` (as shm_open names it, "/name")."""
        self._check_new(name)
        if self.key_prefix is not None and not object_name(key).startswith(self.key_prefix):
            raise InvalidRequest(
                f"Shared memory key {key!r} is refused: this server only maps keys that "
                f"start with '/{self.key_prefix}' (shared_memory_key_prefix)"
            )
        if offset < 0 or byte_size <= 0:
            raise InvalidRequest(
                f"Shared memory region {name!r}: offset must be >= 0 and byte_size > 0"
            )
        mapping = Mapping(key, offset + byte_size)
        details = {"key": key, "offset": offset}
        self._regions[name] = Region(name, SYSTEM, offset, byte_size, mapping, details)
        remember(mapping)

    def serves_cuda(self) -> bool:
        """Whether CUDA regions can be registered here: the CUDA runtime loads and sees
        a GPU (the runtime is asked once per process; server metadata lists it)."""
        try:
            self._cuda()
        except InvalidRequest:
            return False
        return True

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes of the GPU allocation a CUDA IPC handle names."""
        self._check_new(name)
        if byte_size <= 0:
            raise InvalidRequest(f"CUDA shared memory region {name!r}: byte_size must be > 0")
        memory = CudaMemory(self._cuda(), name, raw_handle, device_id, byte_size)
        details = {"device_id": device_id}
        self._regions[name] = Region(name, CUDA, 0, byte_size, memory, details)

    def _check_new(self, name: str) -> None:
        if not name:
            raise InvalidRequest("A shared memory region needs a name")
        if name in self._regions:
            kind = _KIND_NAMES[self._regions[name].kind]
            raise InvalidRequest(
                f"shared memory region '{name}' already in manager (registered as {kind}); "
                "unregister it first"
            )

    def unregister(self, name: str | None = None, kind: str = SYSTEM) -> None:
        """Unregister one region of ``kind``, or every one when ``name`` is empty, in
        this process alone: :meth:`mark_unregistered`, then :meth:`drop`."""
        self.drop(name, kind, self.mark_unregistered(name, kind))

    def mark_unregistered(
        self, name: str | None = None, kind: str = SYSTEM, drained: bool = False
    ) -> list[str]:
        """Mark one region of ``kind``, or every one when ``name`` is empty, as
        unregistered; the names of those a request here still holds (they go when
        :meth:`drop` finds them let go). A name not registered as that kind is no
        error (as in Triton: a client's clean-up may run twice, and clears both kinds
        whatever it registered). ``drained``: mark nothing, only say which are held."""
        held = []
        for region in self._of_kind(name, kind):
            if drained and not region.unregistered:
                continue  # registered again since: not the region that drained
            region.unregistered = True
            if region.holders:
                held.append(region.name)
        return held

    def drop(self, name: str | None, kind: str, keep: Collection[str] = ()) -> None:
        """Drop the regions :meth:`mark_unregistered` marked (``name``'s, or every one of
        ``kind``) but those in ``keep`` (held in some process) and those held here."""
        for region in self._of_kind(name, kind):
            if region.unregistered and not region.holders and region.name not in keep:
                self._drop(region)

    def _of_kind(self, name: str | None, kind: str) -> list[Region]:
        chosen = [self._regions.get(name)] if name else list(self._regions.values())
        return [region for region in chosen if region is not None and region.kind == kind]

    def _drop(self, region: Region) -> None:
        if self._regions.get(region.name) is region:
            del self._regions[region.name]
        region.memory.close()

    def let_go(self, region: Region) -> None:
        """A request that held ``region`` has ended (its outputs written, or failed)."""
        region.holders -= 1
        if region.unregistered and not region.holders:
            if self.on_drained is None:
                self._drop(region)
            else:
                self.on_drained(region.name, region.kind)

    def close(self) -> None:
        """Drop every region of both kinds, held or not (the server stops)."""
        for region in list(self._regions.values()):
            self._drop(region)

    def status(self, name: str | None = None, kind: str = SYSTEM) -> list[dict[str, Any]]:
        """The regions of ``kind``, or the one named; RegionNotFound if it is not one."""
        if not name:
            return [region.status() for region in self._regions.values() if region.kind == kind]
        region = self._regions.get(name)
        if region is None:
            kind_name = "cuda" if kind == CUDA else "system"  # Triton's words
            raise RegionNotFound(f"Unable to find {kind_name} shared memory region: '{name}'")
        if region.kind != kind:
            raise RegionNotFound(
                f"The region named '{name}' is registered as {_KIND_NAMES[region.kind]}, "
                f"not {_KIND_NAMES[kind]}"
            )
        return [region.status()]

    def region(self, name: Any, what: str) -> Region:
        if not isinstance(name, str) or name not in self._regions:
            raise InvalidRequest(f"Unable to find shared memory region: '{name}' ({what})")
        return self._regions[name]


class RegionClaim:
    """The regions one request uses, each held (counted) from its first look-up until
    :meth:`release`, which the edge calls once the request has ended. A claim dropped
    unreleased (a server-sent event stream's, which ends with its encoder) releases then."""

    def __init__(self, registry: SharedMemoryRegistry) -> None:
        self.registry = registry
        self._held: list[Region] = []

    def region(self, name: Any, what: str) -> Region:
        """The region ``name``, held by this claim; InvalidRequest if there is none."""
        region = self.registry.region(name, what)
        if not any(region is held for held in self._held):
            region.holders += 1
            self._held.append(region)
        return region

    def release(self) -> None:
        held, self._held = self._held, []
        for region in held:
            self.registry.let_go(region)

    def __del__(self) -> None:
        self.release()


# ---- tensors in shared memory ----------------------------------------------------------


def _location(parameters: dict[str, Any], what: str) -> tuple[Any, int, int]:
    """The region name, offset and byte size the parameters give."""
    offset = parameters.get(OFFSET, 0)
    size = parameters.get(BYTE_SIZE)
    if size is None:
        raise InvalidRequest(f"{what}: {REGION} needs {BYTE_SIZE} too")
    for key, value in ((OFFSET, offset), (BYTE_SIZE, size)):
        if type(value) is not int or value < 0:
            raise InvalidRequest(f"{what}: {key} must be an integer >= 0, got {value!r}")
    return parameters[REGION], offset, size


def read_input(
    regions: RegionClaim | None,
    name: str,
    datatype: str,
    shape: Any,
    parameters: dict[str, Any],
) -> np.ndarray:
    """The input ``name`` from its region, for fixed-size datatypes read-only: a view
    of a system region's memory, a host copy of a CUDA region's; decoded elements for
    BYTES (Triton's 4-byte length prefixed format)."""
    what = f"Input {name!r}"
    if regions is None:
        raise InvalidRequest(f"{what} names a shared memory region. {TURNED_OFF}")
    region_name, offset, size = _location(parameters, what)
    region = regions.region(region_name, what)
    start = region.span(offset, size, what)
    if datatype != "BYTES":
        expected = element_count(check_shape(name, shape)) * numpy_dtype(datatype).itemsize
        if size != expected:
            raise InvalidRequest(
                f"{what}: shape {list(shape)} of {datatype} needs {expected} bytes, "
                f"{BYTE_SIZE} is {size} (region {region_name!r})"
            )
    return array_from_bytes(name, datatype, shape, region.memory.read(start, size))


def check_outputs(regions: RegionClaim | None, outputs: Any) -> bool:
    """Whether any requested output goes to shared memory, checking (before the model
    runs) that its region is registered and its parameters make sense."""
    shared = False
    for output in outputs:
        if REGION not in output.parameters:
            continue
        what = f"Output {output.name!r}"
        if regions is None:
            raise InvalidRequest(f"{what} names a shared memory region. {TURNED_OFF}")
        region_name, offset, size = _location(output.parameters, what)
        regions.region(region_name, what).span(offset, size, what)
        shared = True
    return shared


def write_requested_outputs(
    regions: RegionClaim | None, request: Any, response: Any
) -> dict[str, dict[str, Any]] | None:
    """The outputs ``request`` asked for in shared memory written there (both edges);
    what their answer carries instead of data (None: shared memory off, or no outputs asked for)."""
    if regions is None or not request.outputs:
        return None
    return write_outputs(regions, request.outputs, response.outputs)


def write_outputs(regions: RegionClaim, outputs: Any, tensors: Any) -> dict[str, dict[str, Any]]:
    """Write each output the request directs to shared memory into its region; the
    parameters its answer carries instead of data, by output name."""
    written: dict[str, dict[str, Any]] = {}
    by_name = {tensor.name: tensor for tensor in tensors}
    for output in outputs:
        tensor = by_name.get(output.name)
        if tensor is None or REGION not in output.parameters:
            continue
        what = f"Output {output.name!r}"
        region_name, offset, size = _location(output.parameters, what)
        region = regions.region(region_name, what)
        written[output.name] = _write(region, offset, size, tensor.data, what)
    return written


def _write(region: Region, offset: int, size: int, data: np.ndarray, what: str) -> dict[str, Any]:
    if data.dtype.kind in "OSU":
        raw: Any = np.frombuffer(array_to_bytes(data), np.uint8)
    else:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if raw.nbytes > size:
        raise InvalidRequest(
            f"{what} is {raw.nbytes} bytes, more than the {size} bytes given in shared "
            f"memory region {region.name!r} ({BYTE_SIZE}); give it at least {raw.nbytes}"
        )
    start = region.span(offset, raw.nbytes, what)
    region.memory.write(start, raw)
    answer: dict[str, Any] = {REGION: region.name, BYTE_SIZE: raw.nbytes}
    if offset:
        answer[OFFSET] = offset
    return answer


def without_location(parameters: dict[str, Any]) -> dict[str, Any]:
    """An input's parameters less the shared memory ones (the model gets its data)."""
    return {key: value for key, value in parameters.items() if key not in PARAMETERS}
