"""System shared memory (Triton's extension): regions of POSIX shared memory objects.

A client on the same host creates a POSIX shared memory object (``shm_open``,
``/dev/shm/<key>``), registers a region of it (key, offset, byte size) under a
name, then passes inputs and receives outputs by reference: the parameters
``shared_memory_region``, ``shared_memory_offset`` and ``shared_memory_byte_size``
on an input or a requested output replace the tensor's data on the wire.

The object is mapped once, at register; an input is a read-only numpy view of the
mapping (no copy), an output is written into it after inference. Every use checks
its bounds against the region, and the object's current size against the mapping
(a client that shrinks the object must get an error, not crash the server with
SIGBUS). A request that still holds a view keeps the mapping alive when its
region is unregistered: unregistering closes what nothing uses, and the views
unmap the rest when they go.

Worker processes read inputs straight from the client's object too
(:func:`shared_slice` / :func:`slice_buffer`): the main process sends where the
data is, not the data.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from inferd.errors import InvalidRequest
from inferd.tensors.datatypes import element_count, numpy_dtype
from inferd.tensors.encoding import array_from_bytes, array_to_bytes, check_shape

SHM_DIR = "/dev/shm"
REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"
PARAMETERS = (REGION, OFFSET, BYTE_SIZE)

TURNED_OFF = (
    "System shared memory is turned off on this server: set shared_memory_enabled: true "
    "(INFERD_SHARED_MEMORY_ENABLED=true) to use it"
)
CUDA_NOT_SUPPORTED = (
    "CUDA shared memory is not supported on this server; use system shared memory "
    "(register_system_shared_memory) or send the tensors in the request"
)


def object_name(key: str) -> str:
    """The object's file name under /dev/shm, from a key as shm_open takes it
    ("/name" or "name"); InvalidRequest for a key that could name another file."""
    name = key[1:] if key.startswith("/") else key
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise InvalidRequest(
            f"Shared memory key {key!r} is not a POSIX shared memory name: use '/name', "
            "a name without other slashes, as shm_open takes it"
        )
    return name


class Mapping:
    """One shared memory object, mapped (read and write) up to the end a region needs."""

    def __init__(self, key: str, length: int) -> None:
        self.key = key
        path = os.path.join(SHM_DIR, object_name(key))
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            raise InvalidRequest(
                f"Cannot open shared memory key {key!r}: {os.strerror(error.errno or 0)}; "
                "create it (shm_open) before registering it"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidRequest(f"Shared memory key {key!r} is not a shared memory object")
            if info.st_size < length or length == 0:
                raise InvalidRequest(
                    f"Shared memory key {key!r} holds {info.st_size} bytes; the region needs "
                    f"{length} (offset + byte_size), and at least 1"
                )
            self.memory = mmap.mmap(fd, length)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.length = length
        self.identity = (info.st_dev, info.st_ino)
        self.closed = False

    def check_size(self, what: str) -> None:
        """InvalidRequest if the mapping is closed or the object has shrunk below it
        (reading past an object's end is SIGBUS, not an exception)."""
        if self.closed or os.fstat(self.fd).st_size < self.length:
            raise InvalidRequest(
                f"{what}: shared memory key {self.key!r} was unregistered, or made smaller "
                "than the region registered on it; register it again"
            )

    def close(self) -> None:
        """Give the mapping back; views still in use keep it mapped until they go."""
        if self.closed:
            return
        self.closed = True
        os.close(self.fd)
        with contextlib.suppress(BufferError):  # exported to a view in use
            self.memory.close()


# The mappings of registered regions in this process, by the id of their mmap: the
# arrays that are views of one can go to a worker as a SharedSlice. Process-wide because
# ids are: an entry leaves when its region is unregistered, before its mmap can go.
_REGISTERED: dict[int, Mapping] = {}


@dataclass(slots=True)
class Region:
    """A registered region: ``byte_size`` bytes from ``offset`` of the object ``key``."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: Mapping

    def span(self, offset: int, size: int, what: str) -> int:
        """Where ``size`` bytes at ``offset`` of the region start in the mapping;
        InvalidRequest naming the region if they do not lie inside it."""
        if offset < 0 or size < 0 or offset + size > self.byte_size:
            raise InvalidRequest(
                f"{what}: {size} bytes at offset {offset} do not fit in shared memory region "
                f"{self.name!r} of {self.byte_size} bytes"
            )
        self.mapping.check_size(what)
        return self.offset + offset

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


class SharedMemoryRegistry:
    """The regions clients registered, by name; one per server (REST and gRPC share it)."""

    def __init__(self, key_prefix: str | None = None) -> None:
        self.key_prefix = object_name(key_prefix) if key_prefix else None
        self._regions: dict[str, Region] = {}

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise InvalidRequest("A shared memory region needs a name")
        if name in self._regions:
            raise InvalidRequest(
                f"Shared memory region {name!r} is registered already; unregister it first"
            )
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
        self._regions[name] = Region(name, key, offset, byte_size, mapping)
        _REGISTERED[id(mapping.memory)] = mapping

    def unregister(self, name: str | None = None) -> None:
        """Unregister one region, or every region when ``name`` is empty. A name not
        registered is no error (as in Triton: a client's clean-up may run twice)."""
        for each in [name] if name else list(self._regions):
            if each in self._regions:
                self._drop(each)

    def _drop(self, name: str) -> None:
        region = self._regions.pop(name)
        _REGISTERED.pop(id(region.mapping.memory), None)
        region.mapping.close()

    def close(self) -> None:
        """Unregister every region (the server stops)."""
        self.unregister(None)

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        if not name:
            return [region.status() for region in self._regions.values()]
        return [self.region(name, "Status").status()]

    def region(self, name: Any, what: str) -> Region:
        if not isinstance(name, str) or name not in self._regions:
            raise InvalidRequest(f"{what}: no shared memory region {name!r} is registered")
        return self._regions[name]


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
    regions: SharedMemoryRegistry | None,
    name: str,
    datatype: str,
    shape: Any,
    parameters: dict[str, Any],
) -> np.ndarray:
    """The input ``name`` from its region: a read-only view for fixed-size datatypes,
    decoded elements for BYTES (Triton's 4-byte length prefixed format)."""
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
    view = np.frombuffer(region.mapping.memory, np.uint8, size, start)
    view.flags.writeable = False  # as the binary extension's inputs: the client's memory
    return array_from_bytes(name, datatype, shape, view)


def check_outputs(regions: SharedMemoryRegistry | None, outputs: Any) -> bool:
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


def write_outputs(
    regions: SharedMemoryRegistry, outputs: Any, tensors: Any
) -> dict[str, dict[str, Any]]:
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
    np.frombuffer(region.mapping.memory, np.uint8, raw.nbytes, start)[:] = raw
    answer: dict[str, Any] = {REGION: region.name, BYTE_SIZE: raw.nbytes}
    if offset:
        answer[OFFSET] = offset
    return answer


# ---- worker processes read the client's object themselves -------------------------------


class SharedSlice(NamedTuple):
    """Where an input's bytes are: what the main process sends a worker instead of them."""

    key: str
    identity: tuple[int, int]  # (st_dev, st_ino): the object the main process checked
    start: int
    nbytes: int
    length: int  # the mapping's length


def underlying(array: np.ndarray) -> Any:
    """The object that owns ``array``'s memory (through views and memoryviews)."""
    base: Any = array.base
    while isinstance(base, np.ndarray | memoryview):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    return base


def shared_slice(array: np.ndarray) -> SharedSlice | None:
    """Where ``array`` lies in a registered region's mapping, if it is a view of one."""
    if not _REGISTERED:  # the usual case: no region registered, nothing to look for
        return None
    base = underlying(array)
    if type(base) is not mmap.mmap or not array.flags.c_contiguous:
        return None
    mapping = _REGISTERED.get(id(base))
    if mapping is None or mapping.closed:
        return None
    origin = np.frombuffer(base, np.uint8, 1).__array_interface__["data"][0]
    start = array.__array_interface__["data"][0] - origin
    return SharedSlice(mapping.key, mapping.identity, start, array.nbytes, mapping.length)


class WorkerMappings:
    """A worker's own mappings of the objects it was sent slices of (a few, reused)."""

    LIMIT = 16

    def __init__(self) -> None:
        self._mappings: OrderedDict[tuple[str, tuple[int, int]], Mapping] = OrderedDict()

    def buffer(self, where: SharedSlice) -> np.ndarray:
        """The slice's bytes, read-only, straight from the object."""
        key = (where.key, where.identity)
        mapping = self._mappings.get(key)
        if mapping is None or mapping.length < where.length:
            mapping = self._open(where)
        self._mappings.move_to_end(key)
        mapping.check_size(f"Shared memory key {where.key!r}")
        view = np.frombuffer(mapping.memory, np.uint8, where.nbytes, where.start)
        view.flags.writeable = False
        return view

    def _open(self, where: SharedSlice) -> Mapping:
        mapping = Mapping(where.key, where.length)
        if mapping.identity != where.identity:  # replaced since the main process checked
            mapping.close()
            raise InvalidRequest(
                f"Shared memory key {where.key!r} was replaced by another object while the "
                "request was on its way; register the region again"
            )
        old = self._mappings.pop((where.key, where.identity), None)
        if old is not None:
            old.close()
        self._mappings[(where.key, where.identity)] = mapping
        while len(self._mappings) > self.LIMIT:
            self._mappings.popitem(last=False)[1].close()
        return mapping


_worker_mappings = WorkerMappings()


def read_slice(where: SharedSlice) -> np.ndarray:
    """In a worker process: the bytes ``where`` names, mapped here (read-only view)."""
    return _worker_mappings.buffer(where)


def without_location(parameters: dict[str, Any]) -> dict[str, Any]:
    """An input's parameters less the shared memory ones (the model gets its data)."""
    return {key: value for key, value in parameters.items() if key not in PARAMETERS}
