"""CUDA shared memory: GPU memory a client shares with the server by CUDA IPC handle.

A client allocates device memory (cudaMalloc), exports it (cudaIpcGetMemHandle)
and registers the 64-byte handle under a name with its device and byte size;
tritonclient.utils.cuda_shared_memory does all three. The server opens the handle
once, at register (cudaIpcOpenMemHandle, which is what checks it), in the main
process, as it maps system shared memory there: the process that keeps the
registry checks every use and writes every output. An input is copied from the
device when the request is decoded (inferd's runtimes take numpy arrays, so its
bytes must reach host memory before a model sees them; a worker process then gets
it as any other input). An output is copied into its region after inference, and
the copy has landed before the answer leaves, so the client may read it at once.

The CUDA runtime (libcudart) is reached through ctypes and loaded on the first
register: no Python package is needed. Where it cannot be loaded, or sees no GPU,
registering answers a 400 saying why. Opening a handle creates the main process's
CUDA context on that device (a few hundred MB of GPU memory), once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import importlib.util
import logging
import os
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from inferd.errors import InvalidRequest

logger = logging.getLogger(__name__)

IPC_HANDLE_SIZE = 64  # bytes of a cudaIpcMemHandle_t
NOT_SUPPORTED = "CUDA shared memory is not supported on this server"
INSTEAD = "use system shared memory (register_system_shared_memory) or send the tensors"


class CudaFailure(Exception):
    """A CUDA call failed, or the runtime could not be loaded (the message says which)."""


class CudaBackend(Protocol):
    """What CUDA regions need of the CUDA runtime (the tests give a fake one)."""

    @property
    def device_count(self) -> int: ...

    def open(self, handle: bytes, device: int) -> tuple[int, int]:
        """Map the allocation an IPC handle names: its device pointer and byte size."""
        ...

    def close(self, pointer: int, device: int) -> None: ...

    def to_host(self, pointer: int, size: int, device: int) -> np.ndarray:
        """``size`` bytes from ``pointer``, copied into a new uint8 array."""
        ...

    def to_device(self, pointer: int, data: np.ndarray, device: int) -> None:
        """Copy ``data`` (contiguous uint8) to ``pointer``; returns once it has landed."""
        ...


# ---- the CUDA runtime through ctypes ----------------------------------------------------


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_SIZE)]


_HOST_TO_DEVICE = 1  # cudaMemcpyKind
_DEVICE_TO_HOST = 2
_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess, as Triton opens handles
_c = ctypes
_RUNTIME_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "cudaGetDeviceCount": (_c.c_int, [_c.POINTER(_c.c_int)]),
    "cudaSetDevice": (_c.c_int, [_c.c_int]),
    "cudaIpcOpenMemHandle": (_c.c_int, [_c.POINTER(_c.c_void_p), _IpcHandle, _c.c_uint]),
    "cudaIpcCloseMemHandle": (_c.c_int, [_c.c_void_p]),
    "cudaMemcpy": (_c.c_int, [_c.c_void_p, _c.c_void_p, _c.c_size_t, _c.c_int]),
    "cudaStreamSynchronize": (_c.c_int, [_c.c_void_p]),
    "cudaGetErrorString": (_c.c_char_p, [_c.c_int]),
}
# The driver's cuMemGetAddressRange (the runtime has none): the bytes an opened
# allocation holds, so a region cannot be registered larger than its memory.
_ADDRESS_RANGE = (_c.c_int, [_c.c_void_p, _c.POINTER(_c.c_size_t), _c.c_uint64])


def _declare(function: Any, restype: Any, argtypes: list[Any]) -> Any:
    function.restype = restype
    function.argtypes = argtypes
    return function


class CudaRuntime:
    """libcudart (and libcuda for one call), as :class:`CudaBackend` describes.

    Every call sets its device first: the runtime's current device is per thread."""

    def __init__(self, runtime: Any, driver: Any) -> None:
        for name, (restype, argtypes) in _RUNTIME_PROTOTYPES.items():
            _declare(getattr(runtime, name), restype, argtypes)
        self._runtime = runtime
        self._address_range = _declare(driver.cuMemGetAddressRange_v2, *_ADDRESS_RANGE)
        count = ctypes.c_int(0)
        self._check(runtime.cudaGetDeviceCount(ctypes.byref(count)), "cudaGetDeviceCount")
        self.device_count = count.value

    def open(self, handle: bytes, device: int) -> tuple[int, int]:
        self._use(device)
        pointer = ctypes.c_void_p()
        ipc_handle = _IpcHandle.from_buffer_copy(handle)
        status = self._runtime.cudaIpcOpenMemHandle(
            ctypes.byref(pointer), ipc_handle, _LAZY_ENABLE_PEER_ACCESS
        )
        self._check(status, "cudaIpcOpenMemHandle")
        address = pointer.value or 0
        size = ctypes.c_size_t(0)
        result = self._address_range(None, ctypes.byref(size), address)
        if result != 0:
            self.close(address, device)
            raise CudaFailure(f"cuMemGetAddressRange failed (CUresult {result})")
        return address, size.value

    def close(self, pointer: int, device: int) -> None:
        self._use(device)
        self._check(self._runtime.cudaIpcCloseMemHandle(pointer), "cudaIpcCloseMemHandle")

    def to_host(self, pointer: int, size: int, device: int) -> np.ndarray:
        self._use(device)
        host = np.empty(size, np.uint8)
        copied = self._runtime.cudaMemcpy(host.ctypes.data, pointer, size, _DEVICE_TO_HOST)
        self._check(copied, "cudaMemcpy (device to host)")
        return host

    def to_device(self, pointer: int, data: np.ndarray, device: int) -> None:
        self._use(device)
        data = np.ascontiguousarray(data)
        copied = self._runtime.cudaMemcpy(pointer, data.ctypes.data, data.nbytes, _HOST_TO_DEVICE)
        self._check(copied, "cudaMemcpy (host to device)")
        # From pageable memory cudaMemcpy may return before the bytes have landed; the
        # client reads them as soon as the answer arrives.
        self._check(self._runtime.cudaStreamSynchronize(None), "cudaStreamSynchronize")

    def _use(self, device: int) -> None:
        self._check(self._runtime.cudaSetDevice(device), "cudaSetDevice")

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            message = self._runtime.cudaGetErrorString(status)
            said = message.decode(errors="replace") if message else f"error {status}"
            raise CudaFailure(f"{call} failed: {said}")


def _runtime_candidates() -> Iterator[str]:
    found = ctypes.util.find_library("cudart")
    if found:
        yield found
    yield from ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0")
    # NVIDIA's runtime wheels (nvidia-cuda-runtime-cu12, which torch and cupy install)
    # keep it under site-packages/nvidia/<part>/lib, off the loader's path.
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        yield from sorted(glob.glob(os.path.join(root, "*", "lib", "libcudart.so*")), reverse=True)


def load_runtime() -> CudaRuntime:
    """The CUDA runtime of this machine; CudaFailure saying what is missing."""
    failure = (
        "no CUDA runtime (libcudart) could be loaded: install the CUDA toolkit or "
        "nvidia-cuda-runtime-cu12 (torch's CUDA build brings it)"
    )
    for candidate in dict.fromkeys(_runtime_candidates()):
        try:
            runtime = ctypes.CDLL(candidate)
        except OSError:
            continue
        try:
            driver = ctypes.CDLL("libcuda.so.1")
        except OSError:
            raise CudaFailure("the NVIDIA driver (libcuda.so.1) is not installed") from None
        try:
            return CudaRuntime(runtime, driver)
        except (CudaFailure, AttributeError) as error:
            # A runtime newer than the driver, say: another one found may do.
            failure = f"{candidate}: {error}"
    raise CudaFailure(failure)


@functools.cache
def _loaded() -> CudaBackend | str:
    """The runtime, or why there is none (asked once per process)."""
    try:
        runtime = load_runtime()
    except CudaFailure as failure:
        return str(failure)
    if runtime.device_count == 0:
        return "the CUDA runtime sees no GPU"
    return runtime


def cuda_backend() -> CudaBackend:
    """The CUDA runtime, loaded on first use; InvalidRequest where there is none."""
    loaded = _loaded()
    if isinstance(loaded, str):
        logger.debug("CUDA shared memory is unavailable: %s", loaded)
        raise InvalidRequest(f"{NOT_SUPPORTED}: {loaded}; {INSTEAD}")
    return loaded


# ---- a CUDA region's memory -------------------------------------------------------------


class CudaMemory:
    """A client's device allocation, opened from its IPC handle: a CUDA region's memory."""

    def __init__(
        self, backend: CudaBackend, name: str, handle: bytes, device: int, byte_size: int
    ) -> None:
        what = f"CUDA shared memory region {name!r}"
        if len(handle) != IPC_HANDLE_SIZE:
            raise InvalidRequest(
                f"{what}: raw_handle holds {len(handle)} bytes; a CUDA IPC handle "
                f"(cudaIpcMemHandle_t) holds {IPC_HANDLE_SIZE}"
            )
        if not 0 <= device < backend.device_count:
            raise InvalidRequest(
                f"{what}: device_id {device} is not a GPU of this server, which sees "
                f"{backend.device_count} (0 to {backend.device_count - 1})"
            )
        try:
            pointer, allocated = backend.open(handle, device)
        except CudaFailure as failure:
            raise InvalidRequest(
                f"{what}: its raw_handle cannot be opened on device {device} ({failure}); "
                "send the handle cudaIpcGetMemHandle made, in another process, on that device"
            ) from None
        self.backend, self.pointer, self.device = backend, pointer, device
        self.closed = False
        if byte_size > allocated:
            self.close()
            raise InvalidRequest(
                f"{what}: byte_size {byte_size} is more than the {allocated} bytes of the "
                "allocation its raw_handle names"
            )

    def check(self, what: str) -> None:
        if self.closed:
            raise InvalidRequest(f"{what}: its CUDA shared memory region was unregistered")

    def read(self, start: int, size: int) -> np.ndarray:
        """``size`` bytes from ``start``, copied to host memory (read-only, as inputs are)."""
        try:
            host = self.backend.to_host(self.pointer + start, size, self.device)
        except CudaFailure as failure:
            raise InvalidRequest(f"Reading CUDA shared memory failed: {failure}") from None
        host.flags.writeable = False
        return host

    def write(self, start: int, raw: np.ndarray) -> None:
        try:
            self.backend.to_device(self.pointer + start, raw, self.device)
        except CudaFailure as failure:
            raise InvalidRequest(f"Writing CUDA shared memory failed: {failure}") from None

    def close(self) -> None:
        """Close the handle (the client's allocation stays the client's)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.backend.close(self.pointer, self.device)
        except CudaFailure as failure:  # nothing a client can do; the region is gone anyway
            logger.warning("Closing a CUDA shared memory handle failed: %s", failure)
