"""The shared memory extension's operations, as both edges call them (serving/shared_memory.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from inferd.errors import InvalidRequest, PermissionDenied
from inferd.serving.server_wide import LocalServerWide
from inferd.serving.shared_memory import (
    CudaSharedMemoryRegion,
    SharedMemoryOperations,
    SystemSharedMemoryRegion,
)
from inferd.triton.shm import CUDA, SYSTEM, RegionNotFound, SharedMemoryRegistry
from tests.unit.test_shm_cuda import FakeCuda

SIZE = 256


@pytest.fixture
def key() -> Iterator[str]:
    """A POSIX shared memory object's key, removed after the test."""
    path = f"/dev/shm/inferd-unit-ops-{os.getpid()}"
    with open(path, "wb") as file:
        file.truncate(SIZE)
    yield path.removeprefix("/dev/shm")
    os.unlink(path)


def operations(regions: SharedMemoryRegistry | None) -> SharedMemoryOperations:
    dataplane: Any = SimpleNamespace(shared_memory=regions)
    return SharedMemoryOperations(dataplane, LocalServerWide(dataplane))


@pytest.mark.anyio
async def test_register_status_and_unregister_a_system_region(key: str) -> None:
    shared = operations(SharedMemoryRegistry())
    await shared.register_system("r", key, 16, 64)
    expected = [SystemSharedMemoryRegion(name="r", key=key, offset=16, byte_size=64)]
    assert shared.system_status(None) == shared.system_status("r") == expected
    assert shared.cuda_status(None) == []
    with pytest.raises(RegionNotFound, match="registered as system shared memory"):
        shared.cuda_status("r")
    with pytest.raises(InvalidRequest, match="already in manager"):
        await shared.register_system("r", key, 0, 8)
    await shared.unregister(CUDA, None)  # another kind: the system region stays
    assert shared.system_status(None) == expected
    await shared.unregister(SYSTEM, "")  # every one of the kind, as gRPC's empty name
    assert shared.system_status(None) == []
    with pytest.raises(RegionNotFound, match="Unable to find system shared memory region"):
        shared.system_status("r")


@pytest.mark.anyio
async def test_register_status_and_unregister_a_cuda_region() -> None:
    cuda = FakeCuda()
    handle, _ = cuda.allocate(64)
    shared = operations(SharedMemoryRegistry(cuda=lambda: cuda))
    await shared.register_cuda("gpu", handle, 1, 48)
    expected = [CudaSharedMemoryRegion(name="gpu", device_id=1, byte_size=48)]
    assert shared.cuda_status(None) == shared.cuda_status("gpu") == expected
    assert shared.system_status(None) == []
    await shared.unregister(CUDA, "gpu")
    assert shared.cuda_status(None) == [] and cuda.open_pointers == []


@pytest.mark.anyio
async def test_while_turned_off_status_lists_nothing_and_changes_are_refused(key: str) -> None:
    shared = operations(None)
    assert shared.system_status(None) == [] and shared.cuda_status(None) == []
    with pytest.raises(PermissionDenied, match="shared_memory_enabled: true"):
        shared.check_turned_on()
    with pytest.raises(PermissionDenied, match="shared_memory_enabled: true"):
        await shared.register_system("r", key, 0, 8)
    with pytest.raises(PermissionDenied, match="shared_memory_enabled: true"):
        await shared.register_cuda("g", b"\0" * 64, 0, 8)
    with pytest.raises(PermissionDenied, match="shared_memory_enabled: true"):
        await shared.unregister(SYSTEM, None)
