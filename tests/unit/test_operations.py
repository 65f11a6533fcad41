"""Server-wide operations as typed messages (serving/operations.py): each one
crosses a private call's frame as itself, a refusal comes back as the error raised, and an
operation is applied by the method it names, here (LocalServerWide) and in a
protocol process (OperationsHere: the repository's changes with their barrier)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from inferd.errors import InferdError, InvalidRequest, ModelNotFound, Overloaded, StatusError
from inferd.server.errors import http_error, portable_error
from inferd.server.protocol_role import OperationsHere
from inferd.serving.operations import (
    ChangeLogSettings,
    Load,
    LoadOnRequest,
    ReadStatistics,
    RegisterCudaMemory,
    RegisterSystemMemory,
    RepositoryReload,
    RepositoryRemove,
    Unload,
    UnregisterMemory,
    model_of,
)
from inferd.serving.server_wide import LocalServerWide
from inferd.supervisor.messages import CatchUp, LoadedAtStart, SwitchReached
from inferd.triton.shm import RegionNotFound
from inferd.workers import ipc

OPERATIONS = [
    Load("a/b", '{"max_batch_size": 4}'),
    Load("iris"),
    LoadOnRequest("m", evict="n"),
    Unload("iris"),
    RepositoryReload("iris", switch=7),
    RepositoryRemove("iris"),
    ChangeLogSettings({"log_info": False, "log_verbose_level": 2}),
    RegisterSystemMemory("r", "/key", 8, 64),
    RegisterCudaMemory("c", bytes(range(64)), 1, 16),
    UnregisterMemory("system", "r"),
    UnregisterMemory("cuda"),
    ReadStatistics("iris", "2"),
    ReadStatistics(),
]


def through_a_frame(message: Any) -> Any:
    """``message`` as the other end of a private call reads it back."""
    return ipc.decode_frame(b"".join(bytes(piece) for piece in ipc.encode(message)))


@pytest.mark.parametrize("operation", OPERATIONS, ids=repr)
def test_every_operation_travels_as_itself(operation: Any) -> None:
    assert through_a_frame(operation) == operation


@pytest.mark.parametrize("request_", [CatchUp(2), LoadedAtStart(0), SwitchReached(5, 1)], ids=repr)
def test_the_coordinators_own_requests_travel_as_themselves(request_: Any) -> None:
    assert through_a_frame(request_) == request_


def crossed(error: Exception) -> Exception:
    """``error`` raised where an operation is applied, as the caller gets it back."""
    return ipc.error_from_wire(through_a_frame(ipc.error_to_wire(portable_error(error, "test"))))


@pytest.mark.parametrize(
    "error",
    [
        InvalidRequest("failed to load 'x': bad config"),
        ModelNotFound("x"),
        Overloaded("busy", retry_after=3),
        StatusError("a runtime's own", 418),
    ],
    ids=lambda error: type(error).__name__,
)
def test_a_refusal_comes_back_as_the_error_raised(error: InferdError) -> None:
    back = crossed(error)
    assert type(back) is type(error) and isinstance(back, InferdError)
    assert back.message == error.message and back.retry_after == error.retry_after
    assert back.code == error.code


def test_an_error_inferd_errors_does_not_name_keeps_its_status() -> None:
    back = crossed(RegionNotFound("no region 'r'"))
    assert isinstance(back, StatusError) and back.http_status == 404
    assert back.message == "no region 'r'"


def test_an_unexpected_error_crosses_as_a_500_that_says_what_it_was(
    caplog: pytest.LogCaptureFixture,
) -> None:
    back = crossed(KeyError("settings"))
    assert isinstance(back, StatusError) and back.http_status == 500
    assert back.message == "'settings'"
    assert "Unexpected error serving test" in caplog.text  # logged where it happened


def test_model_of_names_the_model_a_load_or_unload_is_about() -> None:
    assert [model_of(op) for op in OPERATIONS[:6]] == ["a/b", "iris", "m", "iris", "iris", "iris"]
    assert model_of(ReadStatistics("iris")) is None


class Recording:
    """Stands for the DataPlane (and the repository's changes): notes each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def load(self, name: str, config: str | None) -> None:
        self.calls.append(("load", name, config))

    async def load_on_request(self, name: str, evict: str | None) -> None:
        self.calls.append(("load_on_request", name, evict))

    async def unload(self, name: str) -> None:
        self.calls.append(("unload", name))

    def log_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("log_settings", changes))
        return {"log_info": True}

    def statistics(self, name: str | None, version: str | None) -> list[Any]:
        self.calls.append(("statistics", name, version))
        return []

    shared_memory = None

    async def reload(self, name: str, switch: Callable[[], Awaitable[None]] | None) -> None:
        self.calls.append(("reload", name))
        if switch is not None:
            await switch()

    async def remove(self, name: str) -> None:
        self.calls.append(("remove", name))


@pytest.mark.anyio
async def test_a_data_plane_applies_each_operation_with_the_method_it_names() -> None:
    dataplane = Recording()
    local = LocalServerWide(dataplane)  # type: ignore[arg-type]
    await local.load("m", "{}")
    await local.load_on_request("m", "old")
    await local.unload("m")
    assert await local.change_log_settings({"log_info": True}) == {"log_info": True}
    assert await local.statistics("m", None) == []
    assert dataplane.calls == [
        ("load", "m", "{}"),
        ("load_on_request", "m", "old"),
        ("unload", "m"),
        ("log_settings", {"log_info": True}),
        ("statistics", "m", None),
    ]
    with pytest.raises(InferdError, match="Shared memory"):  # the extension is off
        await local.register_system_memory("r", "/k", 0, 8)
    with pytest.raises(TypeError, match="RepositoryRemove is not applied by a data plane"):
        await local.apply(RepositoryRemove("m"))


@pytest.mark.anyio
async def test_a_protocol_process_applies_the_repositorys_changes_at_their_barrier() -> None:
    recording = Recording()
    passed: list[int] = []

    async def barrier(number: int) -> None:
        passed.append(number)

    here = OperationsHere(recording, recording, barrier)  # type: ignore[arg-type]
    assert await here.take(RepositoryReload("m", switch=4)) is None
    await here.apply(RepositoryReload("n"))  # no barrier: serves once loaded
    await here.apply(RepositoryRemove("m"))
    await here.apply(Unload("m"))
    assert recording.calls == [("reload", "m"), ("reload", "n"), ("remove", "m"), ("unload", "m")]
    assert passed == [4]


@pytest.mark.anyio
async def test_a_process_answers_what_is_no_operation_with_a_refusal() -> None:
    here = OperationsHere(Recording(), Recording())  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="Not a server-wide operation: CatchUp"):
        await here.take(CatchUp(1))  # the coordinator's own, not a process's
    with pytest.raises(InferdError, match="Shared memory") as raised:
        await here.take(RegisterSystemMemory("r", "/k", 0, 8))
    assert http_error(raised.value, "test")[0] == 403


def test_messages_are_small() -> None:
    # What a forwarded load costs on the wire: its class and fields, no path.
    assert sum(len(piece) for piece in ipc.encode(Load("iris"))) < 100
