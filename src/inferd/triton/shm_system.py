"""System shared memory: the POSIX shared memory objects behind system regions.

A client on the same host creates an object (``shm_open``, ``/dev/shm/<key>``) and
registers a region of it (shm.py keeps the registry). The object is mapped once, at
register; an input is a read-only numpy view of the mapping (no copy), an output is
written into it after inference. Every use checks the object's current size against
the mapping (a client that shrinks the object must get an error, not crash the
server with SIGBUS). A request that still holds a view keeps the mapping alive when
its region is unregistered: unregistering closes what nothing uses, and the views
unmap the rest when they go.

Worker processes read inputs straight from the client's object too
(:func:`shared_slice` / :func:`read_slice`): the main process sends where the data
is, not the data.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np

from inferd.errors import InvalidRequest

SHM_DIR = "/dev/shm"


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

    def check(self, what: str) -> None:
        """InvalidRequest if the mapping is closed or the object has shrunk below it
        (reading past an object's end is SIGBUS, not an exception)."""
        if self.closed or os.fstat(self.fd).st_size < self.length:
            raise InvalidRequest(
                f"{what}: shared memory key {self.key!r} was unregistered, or made smaller "
                "than the region registered on it; register it again"
            )

    def read(self, start: int, size: int) -> np.ndarray:
        """``size`` bytes from ``start``: a read-only view of the client's memory."""
        view = np.frombuffer(self.memory, np.uint8, size, start)
        view.flags.writeable = False  # as the binary extension's inputs: the client's memory
        return view

    def write(self, start: int, raw: np.ndarray) -> None:
        np.frombuffer(self.memory, np.uint8, raw.nbytes, start)[:] = raw

    def close(self) -> None:
        """Give the mapping back; views still in use keep it mapped until they go."""
        if self.closed:
            return
        self.closed = True
        forget(self)
        os.close(self.fd)
        with contextlib.suppress(BufferError):  # exported to a view in use
            self.memory.close()


# The mappings of registered regions in this process, by the id of their mmap: the
# arrays that are views of one can go to a worker as a SharedSlice. Process-wide because
# ids are: an entry leaves when its region is unregistered, before its mmap can go.
_REGISTERED: dict[int, Mapping] = {}


def remember(mapping: Mapping) -> None:
    """Views of ``mapping`` (a registered region's) may now go to workers as slices."""
    _REGISTERED[id(mapping.memory)] = mapping


def forget(mapping: Mapping) -> None:
    if _REGISTERED.get(id(mapping.memory)) is mapping:
        del _REGISTERED[id(mapping.memory)]


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
        mapping.check(f"Shared memory key {where.key!r}")
        return mapping.read(where.start, where.nbytes)

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
        # Its views go on as slices too: the model host passes a protocol process's
        # slices to its own workers, which map the client's object themselves (no copy).
        remember(mapping)
        while len(self._mappings) > self.LIMIT:
            self._mappings.popitem(last=False)[1].close()
        return mapping


_worker_mappings = WorkerMappings()


def read_slice(where: SharedSlice) -> np.ndarray:
    """In a worker process: the bytes ``where`` names, mapped here (read-only view)."""
    return _worker_mappings.buffer(where)
