"""CUDA shared memory regions, with a fake CUDA: bounds, handles, the two kinds' namespace.

No GPU here, so two fakes stand in: :class:`FakeCuda`, a CudaBackend over numpy
arrays, drives the registry and the tensor paths; :class:`FakeCudart`, libcudart and
libcuda as ctypes sees them (C callbacks over host memory), drives the real
ctypes binding, so its prototypes, pointer arithmetic and error handling run too.
"""

from __future__ import annotations

import ctypes
import os
import struct
from typing import Any

import numpy as np
import pytest

from inferd.errors import InvalidRequest
from inferd.triton import shm, shm_cuda, shm_system
from inferd.triton.shm_cuda import CudaFailure
from inferd.types import RequestedOutput, Tensor
from inferd.workers import ipc


class FakeCuda:
    """Device memory as numpy arrays; an allocation's pointer is a made-up address."""

    device_count = 2

    def __init__(self) -> None:
        self.allocations: dict[bytes, tuple[int, np.ndarray]] = {}
        self.open_pointers: list[int] = []
        self.closed_pointers: list[int] = []

    def allocate(self, size: int) -> tuple[bytes, np.ndarray]:
        """A new allocation: its IPC handle and its memory."""
        handle = os.urandom(shm_cuda.IPC_HANDLE_SIZE)
        base = (len(self.allocations) + 1) << 32
        memory = np.zeros(size, np.uint8)
        self.allocations[handle] = (base, memory)
        return handle, memory

    def open(self, handle: bytes, device: int) -> tuple[int, int]:
        if handle not in self.allocations:
            raise CudaFailure("cudaIpcOpenMemHandle failed: invalid argument")
        base, memory = self.allocations[handle]
        self.open_pointers.append(base)
        return base, memory.nbytes

    def close(self, pointer: int, device: int) -> None:
        self.open_pointers.remove(pointer)
        self.closed_pointers.append(pointer)

    def _at(self, pointer: int, size: int) -> np.ndarray:
        for base, memory in self.allocations.values():
            if base <= pointer and pointer + size <= base + memory.nbytes:
                assert base in self.open_pointers, "used after close"
                return memory[pointer - base : pointer - base + size]
        raise CudaFailure("cudaMemcpy failed: invalid argument")

    def to_host(self, pointer: int, size: int, device: int) -> np.ndarray:
        return self._at(pointer, size).copy()

    def to_device(self, pointer: int, data: np.ndarray, device: int) -> None:
        self._at(pointer, data.nbytes)[:] = data


@pytest.fixture
def cuda() -> FakeCuda:
    return FakeCuda()


@pytest.fixture
def regions(cuda: FakeCuda) -> shm.SharedMemoryRegistry:
    return shm.SharedMemoryRegistry(cuda=lambda: cuda)


def parameters(region: str, size: int, offset: int = 0) -> dict[str, Any]:
    return {shm.REGION: region, shm.BYTE_SIZE: size, shm.OFFSET: offset}


def test_register_status_and_unregister_by_kind(
    cuda: FakeCuda, regions: shm.SharedMemoryRegistry, tmp_path: Any
) -> None:
    handle, _ = cuda.allocate(64)
    assert regions.status(kind=shm.CUDA) == []
    regions.unregister(None, shm.CUDA)  # nothing registered: no error, as in Triton
    regions.unregister("never", shm.CUDA)
    regions.register_cuda("gpu", handle, 1, 48)
    assert regions.status(kind=shm.CUDA) == [{"name": "gpu", "device_id": 1, "byte_size": 48}]
    assert regions.status("gpu", shm.CUDA) == regions.status(kind=shm.CUDA)
    assert regions.status(kind=shm.SYSTEM) == []
    with pytest.raises(shm.RegionNotFound, match="registered as CUDA shared memory, not system"):
        regions.status("gpu", shm.SYSTEM)
    with pytest.raises(
        shm.RegionNotFound, match="Unable to find cuda shared memory region: 'other'"
    ):
        regions.status("other", shm.CUDA)
    # One namespace for both kinds: a name is taken whatever its kind.
    with pytest.raises(
        InvalidRequest, match="already in manager \\(registered as CUDA shared memory\\)"
    ):
        regions.register("gpu", "/whatever", 0, 8)
    regions.unregister(None, shm.SYSTEM)  # the system kind only: the CUDA region stays
    regions.unregister("gpu", shm.SYSTEM)
    assert cuda.open_pointers and not cuda.closed_pointers
    regions.unregister("gpu", shm.CUDA)
    assert regions.status(kind=shm.CUDA) == [] and cuda.closed_pointers and not cuda.open_pointers


def test_close_closes_every_handle(cuda: FakeCuda, regions: shm.SharedMemoryRegistry) -> None:
    for name in ("a", "b"):
        regions.register_cuda(name, cuda.allocate(16)[0], 0, 16)
    regions.close()
    assert len(cuda.closed_pointers) == 2 and not cuda.open_pointers


@pytest.mark.parametrize(
    ("handle_size", "device", "byte_size", "message"),
    [
        (63, 0, 16, "raw_handle holds 63 bytes; a CUDA IPC handle .* holds 64"),
        (64, 2, 16, "device_id 2 is not a GPU of this server, which sees 2"),
        (64, -1, 16, "device_id -1 is not a GPU"),
        (64, 0, 65, "byte_size 65 is more than the 64 bytes of the allocation"),
        (64, 0, 0, "byte_size must be > 0"),
    ],
)
def test_register_checks_the_handle_device_and_size(
    cuda: FakeCuda,
    regions: shm.SharedMemoryRegistry,
    handle_size: int,
    device: int,
    byte_size: int,
    message: str,
) -> None:
    handle, _ = cuda.allocate(64)
    with pytest.raises(InvalidRequest, match=message):
        regions.register_cuda("r", handle[:handle_size], device, byte_size)
    assert not cuda.open_pointers  # a refused region leaves no handle open
    assert regions.status(kind=shm.CUDA) == []


def test_a_handle_that_cannot_be_opened_is_400(regions: shm.SharedMemoryRegistry) -> None:
    with pytest.raises(InvalidRequest, match=r"cannot be opened on device 0 .*invalid argument"):
        regions.register_cuda("r", b"\1" * 64, 0, 16)


def test_inputs_are_host_copies_read_at_their_offset(
    cuda: FakeCuda, regions: shm.SharedMemoryRegistry
) -> None:
    handle, memory = cuda.allocate(256)
    memory[16:32] = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), np.uint8)
    regions.register_cuda("r", handle, 0, 256)
    array = shm.read_input(regions, "x", "FP32", [2, 2], parameters("r", 16, 16))
    assert array.tolist() == [[0, 1], [2, 3]] and not array.flags.writeable
    memory[16:20] = 9  # a copy: later writes to the device do not change it
    assert array[0, 0] == 0
    # A host array, so a worker gets its bytes, not a shared memory slice.
    assert shm_system.shared_slice(array) is None
    assert not isinstance(ipc.pack_tensors([Tensor("x", array)])[0][3], shm_system.SharedSlice)


@pytest.mark.parametrize(
    ("offset", "size", "message"),
    [(250, 16, "16 bytes at offset 250 do not fit in its 256 bytes"), (0, 12, "needs 16 bytes")],
)
def test_inputs_outside_their_region_are_refused(
    cuda: FakeCuda, regions: shm.SharedMemoryRegistry, offset: int, size: int, message: str
) -> None:
    regions.register_cuda("r", cuda.allocate(256)[0], 0, 256)
    with pytest.raises(InvalidRequest, match=message):
        shm.read_input(regions, "x", "FP32", [4], parameters("r", size, offset))


def test_outputs_are_written_into_the_device_memory(
    cuda: FakeCuda, regions: shm.SharedMemoryRegistry
) -> None:
    handle, memory = cuda.allocate(64)
    regions.register_cuda("out", handle, 0, 64)
    outputs = [
        RequestedOutput("n", parameters("out", 16)),
        RequestedOutput("s", parameters("out", 48, 16)),
    ]
    assert shm.check_outputs(regions, outputs)
    tensors = [
        Tensor("n", np.array([1, 2, 3, 4], dtype=np.int32)),
        Tensor("s", np.array([b"ab", b""], dtype=object)),
    ]
    answers = shm.write_outputs(regions, outputs, tensors)
    assert answers["s"] == {shm.REGION: "out", shm.BYTE_SIZE: 10, shm.OFFSET: 16}
    assert np.frombuffer(memory[:16].tobytes(), np.int32).tolist() == [1, 2, 3, 4]
    assert memory[16:26].tobytes() == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)
    too_big = [RequestedOutput("n", parameters("out", 8))]
    with pytest.raises(InvalidRequest, match="more than the 8 bytes given in shared memory"):
        shm.write_outputs(regions, too_big, tensors)
    with pytest.raises(InvalidRequest, match="for shared memory region: 'out'"):
        shm.check_outputs(regions, [RequestedOutput("n", parameters("out", 16, 56))])


def test_an_unregistered_region_is_neither_read_nor_written(
    cuda: FakeCuda, regions: shm.SharedMemoryRegistry
) -> None:
    regions.register_cuda("r", cuda.allocate(16)[0], 0, 16)
    region = regions.region("r", "Output 'y'")
    regions.unregister("r", shm.CUDA)
    with pytest.raises(InvalidRequest, match="Unable to find shared memory region: 'r'"):
        shm.read_input(regions, "x", "UINT8", [16], parameters("r", 16))
    with pytest.raises(InvalidRequest, match="was unregistered"):
        region.span(0, 16, "Output 'y'")  # a request that looked it up before


def test_a_held_region_unregistered_is_written_then_closed(
    cuda: FakeCuda, regions: shm.SharedMemoryRegistry
) -> None:
    """As a system region: unregistering a region a request holds waits for it."""
    handle, memory = cuda.allocate(16)
    regions.register_cuda("out", handle, 0, 16)
    claim = regions.claim()
    outputs = [RequestedOutput("n", parameters("out", 16))]
    shm.check_outputs(claim, outputs)  # before the model runs: held from here
    regions.unregister("out", shm.CUDA)
    assert [region["name"] for region in regions.status(kind=shm.CUDA)] == ["out"]
    tensors = [Tensor("n", np.arange(4, dtype=np.int32))]
    shm.write_outputs(claim, outputs, tensors)  # the model's answer still lands
    assert np.frombuffer(memory.tobytes(), np.int32).tolist() == [0, 1, 2, 3]
    assert not cuda.closed_pointers
    claim.release()
    assert regions.status(kind=shm.CUDA) == [] and len(cuda.closed_pointers) == 1


def test_without_cuda_register_is_the_clear_400(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_runtime() -> Any:
        raise CudaFailure("no CUDA runtime (libcudart) could be loaded")

    monkeypatch.setattr(shm_cuda, "load_runtime", no_runtime)
    shm_cuda._loaded.cache_clear()
    try:
        regions = shm.SharedMemoryRegistry()
        assert not regions.serves_cuda()  # server metadata leaves cuda_shared_memory out
        expected = "CUDA shared memory is not supported on this server: no CUDA runtime"
        with pytest.raises(InvalidRequest, match=expected):
            regions.register_cuda("r", b"\0" * 64, 0, 16)
        # Status and unregister never need the runtime: a client's clean-up works anywhere.
        regions.unregister(None, shm.CUDA)
        assert regions.status(kind=shm.CUDA) == []
        monkeypatch.setattr(shm_cuda, "load_runtime", lambda: fake_cudart_runtime(0))
        shm_cuda._loaded.cache_clear()
        with pytest.raises(InvalidRequest, match="the CUDA runtime sees no GPU"):
            regions.register_cuda("r", b"\0" * 64, 0, 16)
        assert not regions.serves_cuda()
        monkeypatch.setattr(shm_cuda, "load_runtime", lambda: fake_cudart_runtime(1))
        shm_cuda._loaded.cache_clear()
        assert regions.serves_cuda()
    finally:
        shm_cuda._loaded.cache_clear()


# ---- the real ctypes binding, over a fake libcudart ---------------------------------------

_c = ctypes
_ERROR_TEXT = ctypes.create_string_buffer(b"invalid argument")


class FakeCudart:
    """libcudart and libcuda's entry points as C callbacks over host buffers, which
    play device allocations: a 'device pointer' is a host address."""

    def __init__(self, device_count: int = 1) -> None:
        self.device_count = device_count
        self.buffers: dict[bytes, Any] = {}
        self.devices: list[int] = []
        self.closed: list[int] = []
        self.syncs = 0
        self._functions = {  # kept: ctypes callbacks must outlive their use
            "cudaGetDeviceCount": (_c.c_int, [_c.POINTER(_c.c_int)], self._count),
            "cudaSetDevice": (_c.c_int, [_c.c_int], self._set_device),
            "cudaIpcOpenMemHandle": (
                _c.c_int,
                [_c.POINTER(_c.c_void_p), shm_cuda._IpcHandle, _c.c_uint],
                self._open,
            ),
            "cudaIpcCloseMemHandle": (_c.c_int, [_c.c_void_p], self._close),
            "cudaMemcpy": (
                _c.c_int,
                [_c.c_void_p, _c.c_void_p, _c.c_size_t, _c.c_int],
                self._memcpy,
            ),
            "cudaStreamSynchronize": (_c.c_int, [_c.c_void_p], self._sync),
            "cudaGetErrorString": (_c.c_void_p, [_c.c_int], self._error),
            "cuMemGetAddressRange_v2": (
                _c.c_int,
                [_c.c_void_p, _c.POINTER(_c.c_size_t), _c.c_uint64],
                self._range,
            ),
        }
        for name, (restype, argtypes, implementation) in self._functions.items():
            setattr(self, name, _c.CFUNCTYPE(restype, *argtypes)(implementation))

    def allocate(self, size: int) -> tuple[bytes, Any]:
        handle = os.urandom(shm_cuda.IPC_HANDLE_SIZE)
        self.buffers[handle] = ctypes.create_string_buffer(size)
        return handle, self.buffers[handle]

    def _count(self, count: Any) -> int:
        count[0] = self.device_count
        return 0

    def _set_device(self, device: int) -> int:
        self.devices.append(device)
        return 0 if device < self.device_count else 101

    def _open(self, pointer: Any, handle: Any, flags: int) -> int:
        raw = ctypes.string_at(ctypes.addressof(handle), shm_cuda.IPC_HANDLE_SIZE)
        if raw not in self.buffers or flags != 1:
            return 1
        pointer[0] = ctypes.addressof(self.buffers[raw])
        return 0

    def _close(self, pointer: int) -> int:
        self.closed.append(pointer)
        return 0

    def _memcpy(self, destination: int, source: int, count: int, kind: int) -> int:
        ctypes.memmove(destination, source, count)
        return 0

    def _sync(self, stream: Any) -> int:
        self.syncs += 1
        return 0

    def _error(self, status: int) -> int:
        return ctypes.addressof(_ERROR_TEXT)

    def _range(self, base: Any, size: Any, pointer: int) -> int:
        for buffer in self.buffers.values():
            if ctypes.addressof(buffer) == pointer:
                size[0] = ctypes.sizeof(buffer)
                return 0
        return 1


def fake_cudart_runtime(device_count: int) -> shm_cuda.CudaRuntime:
    fake = FakeCudart(device_count)
    return shm_cuda.CudaRuntime(fake, fake)


def test_the_ctypes_binding_opens_copies_and_closes() -> None:
    fake = FakeCudart(device_count=1)
    runtime = shm_cuda.CudaRuntime(fake, fake)
    assert runtime.device_count == 1
    handle, buffer = fake.allocate(32)
    pointer, size = runtime.open(handle, 0)
    assert (pointer, size) == (ctypes.addressof(buffer), 32)
    runtime.to_device(pointer + 8, np.arange(8, dtype=np.uint8), 0)
    assert buffer.raw[8:16] == bytes(range(8)) and fake.syncs == 1  # landed before the answer
    assert runtime.to_host(pointer + 10, 4, 0).tolist() == [2, 3, 4, 5]
    runtime.close(pointer, 0)
    assert fake.closed == [pointer] and set(fake.devices) == {0}
    with pytest.raises(CudaFailure, match="cudaIpcOpenMemHandle failed: invalid argument"):
        runtime.open(b"\0" * 64, 0)
    with pytest.raises(CudaFailure, match="cudaSetDevice failed"):
        runtime.to_host(pointer, 4, 3)


def test_a_registry_over_the_ctypes_binding() -> None:
    fake = FakeCudart(device_count=1)
    runtime = shm_cuda.CudaRuntime(fake, fake)
    regions = shm.SharedMemoryRegistry(cuda=lambda: runtime)
    handle, buffer = fake.allocate(16)
    ctypes.memmove(buffer, np.arange(4, dtype=np.int32).tobytes(), 16)
    regions.register_cuda("r", handle, 0, 16)
    array = shm.read_input(regions, "x", "INT32", [4], parameters("r", 16))
    shm.write_outputs(regions, [RequestedOutput("y", parameters("r", 16))], [Tensor("y", -array)])
    assert np.frombuffer(buffer.raw, np.int32).tolist() == [0, -1, -2, -3]
    with pytest.raises(InvalidRequest, match="byte_size 17 is more than the 16 bytes"):
        regions.register_cuda("big", handle, 0, 17)
    regions.unregister(None, shm.CUDA)
    assert fake.closed == [ctypes.addressof(buffer)] * 2  # the refused one was closed too


def test_the_prototypes_fit_this_machines_libcudart() -> None:
    """Where a CUDA runtime is installed (a toolkit, with or without a GPU), the real
    library takes the binding's calls: either it counts GPUs, or it says in its own
    words why not."""
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        fake_driver = FakeCudart()
        try:
            runtime = shm_cuda.CudaRuntime(library, fake_driver)
        except CudaFailure as failure:
            assert str(failure).startswith("cudaGetDeviceCount failed: ")
            assert "error " not in str(failure)  # a message from cudaGetErrorString
        else:
            assert runtime.device_count >= 0
        return
    pytest.skip("no CUDA runtime (libcudart) on this machine")
