"""The system shared memory registry: mapping, bounds, lifetimes, the worker's path."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from inferd.errors import InvalidRequest
from inferd.triton import shm, shm_system
from inferd.types import RequestedOutput, Tensor
from inferd.workers import ipc

SIZE = 4096
Maker = Callable[[str, int], str]


@pytest.fixture
def make_object() -> Iterator[Maker]:
    """Create POSIX shared memory objects (key -> "/name"), removed after the test."""
    made: list[str] = []

    def make(name: str, size: int = SIZE) -> str:
        path = f"/dev/shm/inferd-unit-{os.getpid()}-{name}"
        with open(path, "wb") as file:
            file.truncate(size)
        made.append(path)
        return path.removeprefix("/dev/shm")

    yield make
    for path in made:
        if os.path.exists(path):
            os.unlink(path)


def write(key: str, offset: int, data: bytes) -> None:
    with open(f"/dev/shm{key}", "r+b") as file:
        file.seek(offset)
        file.write(data)


def test_keys_name_objects_under_dev_shm_only() -> None:
    assert shm_system.object_name("/abc") == shm_system.object_name("abc") == "abc"
    for key in ("", "/", "/a/b", "/..", "../etc/passwd", "/x\0y"):
        with pytest.raises(InvalidRequest, match="not a POSIX shared memory name"):
            shm_system.object_name(key)


def test_register_checks_the_object_and_the_prefix(make_object: Maker) -> None:
    key = make_object("a", 64)
    regions = shm.SharedMemoryRegistry(key_prefix=f"/inferd-unit-{os.getpid()}-")
    with pytest.raises(InvalidRequest, match="holds 64 bytes"):
        regions.register("r", key, 32, 64)
    with pytest.raises(InvalidRequest, match="Cannot open"):
        regions.register("r", key + "-missing", 0, 8)
    with pytest.raises(InvalidRequest, match="shared_memory_key_prefix"):
        shm.SharedMemoryRegistry(key_prefix="/other-").register("r", key, 0, 8)
    regions.register("r", key, 0, 64)
    with pytest.raises(InvalidRequest, match="already in manager"):
        regions.register("r", key, 0, 8)
    assert regions.status() == [{"name": "r", "key": key, "offset": 0, "byte_size": 64}]
    regions.unregister("r")
    regions.unregister("r")  # again: nothing to do, as in Triton
    assert regions.status() == []
    with pytest.raises(shm.RegionNotFound, match="Unable to find system shared memory region: 'r'"):
        regions.status("r")


def test_inputs_are_read_only_views_of_the_clients_memory(make_object: Maker) -> None:
    key = make_object("view")
    regions = shm.SharedMemoryRegistry()
    regions.register("r", key, 128, 256)
    write(key, 128 + 16, np.arange(4, dtype=np.float32).tobytes())
    parameters = {shm.REGION: "r", shm.OFFSET: 16, shm.BYTE_SIZE: 16}
    array = shm.read_input(regions, "x", "FP32", [2, 2], parameters)
    assert array.tolist() == [[0, 1], [2, 3]] and not array.flags.writeable
    write(key, 128 + 16, np.float32(7).tobytes())
    assert array[0, 0] == 7  # no copy: the client's memory itself


@pytest.mark.parametrize(
    ("offset", "size", "message"),
    [
        (250, 16, "Invalid offset \\+ byte size for shared memory region: 'r'"),
        (0, 12, "needs 16 bytes"),
    ],
)
def test_inputs_outside_their_region_are_refused(
    make_object: Maker, offset: int, size: int, message: str
) -> None:
    regions = shm.SharedMemoryRegistry()
    regions.register("r", make_object("bounds"), 0, 256)
    parameters = {shm.REGION: "r", shm.OFFSET: offset, shm.BYTE_SIZE: size}
    with pytest.raises(InvalidRequest, match=message):
        shm.read_input(regions, "x", "FP32", [4], parameters)


def test_an_object_shrunk_after_register_is_an_error_not_sigbus(make_object: Maker) -> None:
    key = make_object("shrink")
    regions = shm.SharedMemoryRegistry()
    regions.register("r", key, 0, SIZE)
    os.truncate(f"/dev/shm{key}", 16)
    parameters = {shm.REGION: "r", shm.BYTE_SIZE: SIZE}
    with pytest.raises(InvalidRequest, match="made smaller"):
        shm.read_input(regions, "x", "UINT8", [SIZE], parameters)


def test_unregistering_a_region_in_use_keeps_its_views_valid(make_object: Maker) -> None:
    key = make_object("lifetime")
    write(key, 0, b"\x05" * 8)
    regions = shm.SharedMemoryRegistry()
    regions.register("r", key, 0, 8)
    array = shm.read_input(regions, "x", "UINT8", [8], {shm.REGION: "r", shm.BYTE_SIZE: 8})
    regions.unregister()  # every region, while the request still holds its view
    assert array.sum() == 40
    with pytest.raises(InvalidRequest, match="Unable to find shared memory region: 'r'"):
        shm.read_input(regions, "x", "UINT8", [8], {shm.REGION: "r", shm.BYTE_SIZE: 8})


def test_a_held_region_unregistered_stays_until_its_last_holder_lets_go(
    make_object: Maker,
) -> None:
    """As Triton: listed, usable and its name taken until the requests using it end."""
    key = make_object("held")
    regions = shm.SharedMemoryRegistry()
    regions.register("r", key, 0, 8)
    location = {shm.REGION: "r", shm.BYTE_SIZE: 8}
    first, second = regions.claim(), regions.claim()
    shm.read_input(first, "x", "UINT8", [8], location)
    shm.read_input(first, "y", "UINT8", [8], location)  # one hold per request
    regions.unregister("r")
    assert [region["name"] for region in regions.status()] == ["r"]
    with pytest.raises(InvalidRequest, match="shared memory region 'r' already in manager"):
        regions.register("r", key, 0, 8)
    shm.read_input(second, "x", "UINT8", [8], location)  # arrived after: holds it too
    drained: list[tuple[str, str]] = []
    regions.on_drained = lambda name, kind: drained.append((name, kind))
    first.release()
    first.release()  # twice: no more
    assert drained == []
    second.release()
    assert drained == [("r", shm.SYSTEM)]  # asked server-wide; dropped where none holds it
    regions.drop("r", shm.SYSTEM, keep=["r"])
    assert regions.status() == [{"name": "r", "key": key, "offset": 0, "byte_size": 8}]
    regions.drop("r", shm.SYSTEM)
    assert regions.status() == []
    regions.register("r", key, 0, 8)  # the name is free again


def test_outputs_are_written_into_their_region(make_object: Maker) -> None:
    key = make_object("out")
    regions = shm.SharedMemoryRegistry()
    regions.register("out", key, 0, 64)
    outputs = [
        RequestedOutput("n", {shm.REGION: "out", shm.BYTE_SIZE: 16}),
        RequestedOutput("s", {shm.REGION: "out", shm.OFFSET: 16, shm.BYTE_SIZE: 48}),
    ]
    assert shm.check_outputs(regions, outputs)
    tensors = [
        Tensor("n", np.array([1, 2, 3, 4], dtype=np.int32)),
        Tensor("s", np.array([b"ab", b""], dtype=object)),
    ]
    answers = shm.write_outputs(regions, outputs, tensors)
    assert answers == {
        "n": {shm.REGION: "out", shm.BYTE_SIZE: 16},
        "s": {shm.REGION: "out", shm.BYTE_SIZE: 10, shm.OFFSET: 16},
    }
    with open(f"/dev/shm{key}", "rb") as file:
        raw = file.read(26)
    assert np.frombuffer(raw[:16], np.int32).tolist() == [1, 2, 3, 4]
    assert raw[16:] == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)


def test_an_output_larger_than_its_region_is_refused(make_object: Maker) -> None:
    regions = shm.SharedMemoryRegistry()
    regions.register("small", make_object("small"), 0, 64)
    outputs = [RequestedOutput("y", {shm.REGION: "small", shm.BYTE_SIZE: 8})]
    with pytest.raises(InvalidRequest, match="more than the 8 bytes given in shared memory"):
        shm.write_outputs(regions, outputs, [Tensor("y", np.zeros(4, np.int32))])
    with pytest.raises(InvalidRequest, match="for shared memory region: 'small'"):
        shm.check_outputs(regions, [RequestedOutput("y", {shm.REGION: "small", shm.OFFSET: 60,
                                                          shm.BYTE_SIZE: 8})])  # fmt: skip


def test_the_extension_off_refuses_tensors_in_shared_memory() -> None:
    with pytest.raises(InvalidRequest, match="turned off"):
        shm.read_input(None, "x", "FP32", [1], {shm.REGION: "r", shm.BYTE_SIZE: 4})
    with pytest.raises(InvalidRequest, match="turned off"):
        shm.check_outputs(None, [RequestedOutput("y", {shm.REGION: "r", shm.BYTE_SIZE: 4})])


def test_a_worker_gets_where_the_input_is_not_its_bytes(make_object: Maker) -> None:
    key = make_object("worker")
    regions = shm.SharedMemoryRegistry()
    regions.register("r", key, 64, 1024)
    write(key, 64, np.arange(256, dtype=np.float32).tobytes())
    parameters = {shm.REGION: "r", shm.BYTE_SIZE: 1024}
    array = shm.read_input(regions, "x", "FP32", [16, 16], parameters)
    packed = ipc.pack_tensors([Tensor("x", array)])
    assert isinstance(packed[0][3], shm_system.SharedSlice)
    pieces = ipc.encode(packed)
    assert len(pieces) == 1 and len(pieces[0]) < 512  # no out-of-band buffer: no data
    (received,) = ipc.unpack_tensors(packed)
    np.testing.assert_array_equal(received.data, array)
    assert not received.data.flags.writeable
    regions.unregister("r")  # a view of a region no longer registered travels as bytes
    assert not isinstance(ipc.pack_tensors([Tensor("x", array)])[0][3], shm_system.SharedSlice)


def test_a_worker_refuses_an_object_replaced_on_the_way(make_object: Maker) -> None:
    key = make_object("replaced")
    regions = shm.SharedMemoryRegistry()
    regions.register("r", key, 0, 64)
    array = shm.read_input(regions, "x", "UINT8", [64], {shm.REGION: "r", shm.BYTE_SIZE: 64})
    where = shm_system.shared_slice(array)
    assert where is not None
    os.unlink(f"/dev/shm{key}")
    make_object("replaced", 64)
    with pytest.raises(InvalidRequest, match="replaced by another object"):
        shm_system.WorkerMappings().buffer(where)
    regions.close()


def test_settings_turn_it_on_and_check_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferd.settings import ServerSettings

    assert ServerSettings().shared_memory_enabled is False
    with pytest.raises(ValueError, match="start of a shared memory name"):
        ServerSettings(shared_memory_key_prefix="/a/b")
    monkeypatch.setenv("INFERD_SHARED_MEMORY_ENABLED", "true")
    monkeypatch.setenv("INFERD_SHARED_MEMORY_KEY_PREFIX", "/inferd-")
    settings = ServerSettings()
    assert settings.shared_memory_enabled and settings.shared_memory_key_prefix == "/inferd-"


def test_its_routes_and_methods_are_the_shared_memory_api_group() -> None:
    from inferd.server.grpc.access import METHOD_GROUPS
    from inferd.server.routes import API_ROUTES

    service = "/inference.GRPCInferenceService/"
    for kind in ("System", "Cuda"):
        for call in ("Status", "Register", "Unregister"):
            assert METHOD_GROUPS[f"{service}{kind}SharedMemory{call}"] == "shared_memory"
    shared = {route.path for route in API_ROUTES if route.api == "shared_memory"}
    assert "/v2/systemsharedmemory/region/{region}/register" in shared
    assert "/v2/cudasharedmemory/unregister" in shared
    assert len(shared) == 10


def test_grpc_inputs_in_shared_memory_take_no_raw_contents(make_object: Maker) -> None:
    from inferd.protocol import pb
    from inferd.server.grpc.codec import decode_infer_request

    key = make_object("grpc")
    write(key, 0, np.arange(4, dtype=np.int32).tobytes())
    regions = shm.SharedMemoryRegistry()
    regions.register("r", key, 0, 16)
    message = pb.ModelInferRequest(model_name="m")
    shared = message.inputs.add(name="a", datatype="INT32", shape=[4])
    shared.parameters[shm.REGION].string_param = "r"
    shared.parameters[shm.BYTE_SIZE].int64_param = 16
    message.inputs.add(name="b", datatype="INT32", shape=[2])
    message.raw_input_contents.append(np.array([7, 8], dtype=np.int32).tobytes())
    request, _ = decode_infer_request(message, regions)
    assert [t.data.tolist() for t in request.inputs] == [[0, 1, 2, 3], [7, 8]]
    assert request.inputs[0].parameters == {}
    message.raw_input_contents.append(b"\0" * 8)  # one too many: "a" has none
    with pytest.raises(InvalidRequest, match="inputs in shared memory have none"):
        decode_infer_request(message, regions)
