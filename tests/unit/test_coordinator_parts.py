"""The coordinator's parts: the journal of typed operations, each process's reply read
once as a typed outcome (over a real private call), the outcomes settled, statistics
summed, and a forwarded refusal answered as the local error would be."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import (
    InferdError,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    PermissionDenied,
    StatusError,
)
from inferd.server.errors import grpc_error, http_error, portable_error
from inferd.server.roles import HostStart, Role
from inferd.serving.operations import (
    ChangeLogSettings,
    ChangeTraceSettings,
    DropMemory,
    Load,
    LoadOnRequest,
    ReadStatistics,
    RegisterCudaMemory,
    RegisterSystemMemory,
    RepositoryReload,
    RepositoryRemove,
    Unload,
    UnregisterMemory,
)
from inferd.supervisor.coordinator import Coordinator
from inferd.supervisor.coordinator_calls import coordinator_calls
from inferd.supervisor.forwarding import CoordinatorUnreachable, ForwardingServerWide, catch_up
from inferd.supervisor.journal import Journal
from inferd.supervisor.merging import NO_PROCESS, held_anywhere, merge_statistics, settle
from inferd.supervisor.outcomes import (
    Applied,
    NoAnswer,
    NotHeld,
    Process,
    Refused,
    ask,
    said,
)
from inferd.supervisor.paths import PrivatePaths, ProcessRole
from inferd.triton.shm import RegionNotFound
from inferd.workers.private_calls import Handler, call
from tests.support.private_calls import answering

LOAD = Load("iris", "{}")
UNLOAD = Unload("iris")
REGISTER = RegisterSystemMemory("r1", "/k", 0, 16)


def journal_of(*operations: Any) -> Journal:
    journal = Journal()
    for operation in operations:
        journal.applied(operation, None)
    return journal


def test_a_models_last_load_or_unload_is_kept_and_moves_last() -> None:
    other = Load("echo")
    assert journal_of(LOAD, other, UNLOAD).operations() == [other, UNLOAD]
    assert journal_of(UNLOAD, other, LOAD).operations() == [other, LOAD]


def test_the_repositorys_changes_are_a_models_last_operation_too() -> None:
    # A reload is kept without its barrier: a process that replays it switches alone.
    journal = journal_of(LOAD, RepositoryReload("iris", switch=3))
    assert journal.operations() == [RepositoryReload("iris")]
    journal.applied(RepositoryRemove("iris"), None)
    assert journal.operations() == [RepositoryRemove("iris")]


def test_the_log_settings_kept_are_those_in_force_after_the_last_change() -> None:
    journal = Journal()
    journal.applied(ChangeLogSettings({"log_info": False}), {"log_info": True})
    journal.applied(ChangeLogSettings({"log_verbose_level": 1}), {"all": 1})
    assert journal.operations() == [ChangeLogSettings({"all": 1})]


def test_regions_are_kept_until_unregistered_one_by_one_or_by_kind() -> None:
    cuda = RegisterCudaMemory("c1", b"handle", 0, 16)
    second = RegisterSystemMemory("r2", "/k2", 0, 16)
    journal = journal_of(REGISTER, cuda, second, LOAD)
    journal.applied(UnregisterMemory("system", "r2"), None)
    assert journal.operations() == [REGISTER, cuda, LOAD]
    # A name of the other kind is not that region.
    journal.applied(UnregisterMemory("cuda", "r1"), None)
    assert journal.operations() == [REGISTER, cuda, LOAD]
    journal.applied(UnregisterMemory("system"), None)
    assert journal.operations() == [cuda, LOAD]


def test_a_region_drained_or_dropped_adds_nothing_to_replay() -> None:
    journal = journal_of(REGISTER)
    journal.applied(UnregisterMemory("system", "r1"), [])
    journal.applied(DropMemory("system", "r1"), None)
    journal.applied(UnregisterMemory("system", "r1", drained=True), [])
    assert journal.operations() == []


def test_the_trace_settings_kept_are_the_fields_set_for_each_scope() -> None:
    journal = Journal()
    journal.applied(ChangeTraceSettings("", {"trace_rate": "5"}), {"set": {"trace_rate": "5"}})
    journal.applied(ChangeTraceSettings("m", {"trace_count": "2"}), {"set": {"trace_count": "2"}})
    journal.applied(ChangeTraceSettings("", {"trace_rate": None}), {"set": {}})
    assert journal.operations() == [
        ChangeTraceSettings("m", {"trace_count": "2"}, whole=True),
        ChangeTraceSettings("", {}, whole=True),
    ]


def test_a_load_on_request_is_not_replayed_to_a_process_that_starts() -> None:
    journal = journal_of(LoadOnRequest("m", evict="x"))
    assert journal.operations() == []
    journal.applied(Load("m"), None)
    journal.applied(LoadOnRequest("m"), None)  # a no-op where it is pinned
    assert journal.operations() == [Load("m")]


def test_a_read_is_not_journaled() -> None:
    with pytest.raises(ValueError, match="not a server-wide operation to replay"):
        Journal().applied(ReadStatistics("iris"), [])


FIRST, SECOND, THIRD = (Process.protocol(index) for index in range(3))
HOST = Process.host(3)
REFUSAL = InvalidRequest("failed to load 'iris': no such file")
NOT_FOUND = ModelNotFound("iris")


def refusing(error: Exception) -> Handler:
    async def handle(message: Any) -> Any:
        raise portable_error(error, "test")

    return handle


def same_error(outcome: Any, cls: type, message: str) -> bool:
    return type(outcome.error) is cls and outcome.error.message == message


@pytest.mark.anyio
async def test_a_reply_is_read_once_into_the_outcome_of_its_process(tmp_path: Path) -> None:
    paths = PrivatePaths(tmp_path)
    async with answering(paths.operations(1), refusing(REFUSAL)):
        refused = await ask(paths, SECOND, LOAD)
    assert isinstance(refused, Refused) and refused.process == SECOND
    assert same_error(refused, InvalidRequest, REFUSAL.message)

    async def log_settings(message: Any) -> Any:
        return {"log_info": True, "asked": repr(message)}

    async with answering(paths.operations(0), log_settings):
        applied = await ask(paths, FIRST, LOAD)
    assert applied == Applied(FIRST, {"log_info": True, "asked": repr(LOAD)})
    # "No such model" is a fact about an unload or a statistics read, a refusal of a load.
    async with answering(paths.operations(3), refusing(NOT_FOUND)):
        outcomes = [await ask(paths, HOST, op) for op in (UNLOAD, ReadStatistics("iris"), LOAD)]
    assert [type(outcome) for outcome in outcomes] == [NotHeld, NotHeld, Refused]
    assert all(same_error(outcome, ModelNotFound, NOT_FOUND.message) for outcome in outcomes)


@pytest.mark.anyio
async def test_a_process_that_does_not_listen_or_answers_no_frame_gave_no_answer(
    tmp_path: Path,
) -> None:
    paths = PrivatePaths(tmp_path)
    gone = await ask(paths, HOST, LOAD)  # nothing at its socket
    assert isinstance(gone, NoAnswer) and "FileNotFoundError" in said(gone)

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.write(b"not a frame")
        writer.close()

    server = await asyncio.start_unix_server(garbage, str(paths.operations(0)))
    async with server:
        broken = await ask(paths, FIRST, LOAD)
    assert isinstance(broken, NoAnswer) and "answered no reply" in said(broken)


@pytest.mark.anyio
async def test_an_error_no_other_process_knows_crosses_as_the_status_rest_answers(
    tmp_path: Path,
) -> None:
    paths = PrivatePaths(tmp_path)
    unknown = RegionNotFound("no region 'r'")  # of inferd/triton, not inferd.errors
    async with answering(paths.operations(0), refusing(unknown)):
        refused = await ask(paths, FIRST, LOAD)
    assert isinstance(refused, Refused) and isinstance(refused.error, StatusError)
    assert http_error(refused.error, "test")[0] == http_error(unknown, "test")[0] == 404
    assert said(refused) == "no region 'r'"


def test_every_process_applied_it_answers_the_first_protocol_process() -> None:
    settled = settle([Applied(HOST, "h"), Applied(SECOND, "b"), Applied(FIRST, "a")])
    assert settled.answer == Applied(FIRST, "a") and settled.ok
    assert settled.values == ["a", "b", "h"]  # process order, the host last
    assert (settled.held, settled.refused, settled.unanswered) == (3, [], [])


def test_one_refusal_is_what_the_client_gets_and_the_others_keep_it() -> None:
    refused = Refused(SECOND, REFUSAL)
    settled = settle([Applied(FIRST), refused, Applied(THIRD)])
    assert settled.answer is refused and not settled.ok
    assert settled.refused == [refused] and settled.held == 2  # journaled: two applied it


def test_the_hosts_refusal_says_why_better_than_a_protocol_processs() -> None:
    hosts = Refused(HOST, InvalidRequest("the GPU is gone"))
    settled = settle([Refused(FIRST, REFUSAL), Refused(SECOND, REFUSAL), hosts])
    assert settled.answer is hosts and settled.held == 0
    assert [each.process for each in settled.refused] == [FIRST, SECOND, HOST]


def test_the_hosts_not_held_is_no_refusal_a_protocol_processs_is() -> None:
    unloaded = settle([Applied(FIRST), Applied(SECOND), NotHeld(HOST, NOT_FOUND)])
    assert unloaded.answer == Applied(FIRST) and unloaded.refused == []
    assert unloaded.values == [None, None] and unloaded.held == 3
    unknown = settle(
        [NotHeld(FIRST, NOT_FOUND), NotHeld(SECOND, NOT_FOUND), NotHeld(HOST, NOT_FOUND)]
    )
    assert unknown.answer == NotHeld(FIRST, NOT_FOUND) and not unknown.ok
    assert [each.process for each in unknown.refused] == [FIRST, SECOND]


def test_the_host_alone_holding_nothing_of_it_is_done() -> None:
    """The protocol processes restarting: the host unloaded nothing, and the unload is
    journaled for them to catch up on."""
    settled = settle([NoAnswer(FIRST, "gone"), NotHeld(HOST, NOT_FOUND)])
    assert settled.answer == Applied(HOST) and settled.ok
    assert (settled.values, settled.held) == ([], 1)
    assert settled.unanswered == [NoAnswer(FIRST, "gone")]


def test_no_answer_from_anyone_settles_to_none() -> None:
    settled = settle([NoAnswer(FIRST, "gone"), NoAnswer(HOST, "gone")])
    assert settled.answer is None and not settled.ok and settled.held == 0
    assert [each.process for each in settled.unanswered] == [FIRST, HOST]
    assert settle([]).answer is None


def test_a_partial_failure_answers_the_refusal_and_counts_who_applied_it() -> None:
    outcomes = [Applied(FIRST, {}), NoAnswer(SECOND, "ConnectError"), Refused(THIRD, REFUSAL)]
    settled = settle(outcomes)
    assert settled.answer == Refused(THIRD, REFUSAL)
    assert (settled.held, settled.values) == (1, [{}])
    assert settled.unanswered == [NoAnswer(SECOND, "ConnectError")]


def test_an_unregister_answers_the_regions_held_in_any_process() -> None:
    settled = settle([Applied(FIRST, ["b"]), Applied(SECOND, None), Applied(HOST, ["a", "b"])])
    assert held_anywhere(settled) == ["a", "b"]


def stats(name: str, version: str, success: int, batches: dict[int, int], last: int) -> dict:
    duration = {"count": success, "ns": success * 10}
    return {
        "name": name,
        "version": version,
        "last_inference": last,
        "inference_count": success,
        "execution_count": sum(batches.values()),
        "inference_stats": {"success": duration, "fail": {"count": 0, "ns": 0}},
        "batch_stats": [
            {"batch_size": size, "compute_infer": {"count": count, "ns": 0}}
            for size, count in batches.items()
        ],
        "memory_usage": [],
    }


def test_statistics_are_summed_per_version_and_batch_size() -> None:
    first = [stats("iris", "", 3, {1: 3}, last=50), stats("echo", "1", 2, {2: 1}, last=9)]
    second = [stats("iris", "", 4, {1: 2, 2: 1}, last=70), stats("echo", "2", 1, {1: 1}, last=5)]
    merged = merge_statistics([first, second])
    assert [(model["name"], model["version"]) for model in merged] == [
        ("echo", "1"),
        ("echo", "2"),
        ("iris", ""),
    ]
    iris = merged[2]
    assert iris["last_inference"] == 70
    assert (iris["inference_count"], iris["execution_count"]) == (7, 6)
    assert iris["inference_stats"]["success"] == {"count": 7, "ns": 70}
    assert iris["batch_stats"] == [
        {"batch_size": 1, "compute_infer": {"count": 5, "ns": 0}},
        {"batch_size": 2, "compute_infer": {"count": 1, "ns": 0}},
    ]
    assert merged[0] == first[1]  # one process's alone: as it was


@pytest.mark.parametrize(
    "local",
    [
        InvalidRequest("failed to load 'x': the config parameter is not valid JSON"),
        ModelNotFound("x"),
        PermissionDenied("Shared memory is turned off"),
        Overloaded("Too many requests", retry_after=3),
        StatusError("a runtime's own", 418),
    ],
    ids=lambda error: type(error).__name__,
)
@pytest.mark.anyio
async def test_a_refusal_forwarded_answers_as_the_local_error(
    local: InferdError, tmp_path: Path
) -> None:
    """A process refuses, the coordinator answers its refusal, the forwarding process
    raises it: the client's answer is the local error's, over REST and gRPC."""
    coordinator = Coordinator(PrivatePaths(tmp_path), 1)
    paths = coordinator.paths
    async with (
        answering(paths.operations(0), refusing(local)),
        answering(paths.coordinator, coordinator_calls(coordinator)),
    ):
        with pytest.raises(InferdError) as raised:
            await ForwardingServerWide(paths.coordinator).unload("x")
    forwarded = raised.value
    assert type(forwarded) is type(local)
    assert http_error(forwarded, "test") == http_error(local, "test")
    assert grpc_error(forwarded, "test") == grpc_error(local, "test")


@pytest.mark.anyio
async def test_no_process_answering_is_unavailable(tmp_path: Path) -> None:
    coordinator = Coordinator(PrivatePaths(tmp_path), 2)  # neither process listens
    async with answering(coordinator.paths.coordinator, coordinator_calls(coordinator)):
        with pytest.raises(StatusError, match=NO_PROCESS) as raised:
            await ForwardingServerWide(coordinator.paths.coordinator).load("x", None)
        with pytest.raises(InvalidRequest, match="Not a message to the coordinator: str"):
            await call(coordinator.paths.coordinator, "hello")
    assert http_error(raised.value, "test")[0] == 503


@pytest.mark.anyio
async def test_a_coordinator_that_does_not_answer_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(CoordinatorUnreachable) as raised:
        await ForwardingServerWide(tmp_path / "coordinator.sock").unload("m")
    error = raised.value
    assert http_error(error, "test")[0] == 503
    assert "could not reach the coordinator" in error.message
    assert "No such file" in error.message


@pytest.mark.anyio
async def test_without_a_coordinator_operations_and_catching_up_are_unavailable(
    tmp_path: Path,
) -> None:
    paths = PrivatePaths(tmp_path)  # nothing serves its coordinator.sock
    with pytest.raises(CoordinatorUnreachable, match=r"Unload\(name='m'\)"):
        await ForwardingServerWide(paths.coordinator).unload("m")
    with pytest.raises(CoordinatorUnreachable, match=r"CatchUp\(index=1\)"):
        await catch_up(ProcessRole(paths, 1, Role.PROTOCOL, HostStart.FOR_A_LOAD))


@pytest.mark.anyio
async def test_a_process_that_has_loaded_waits_until_every_process_has() -> None:
    coordinator = Coordinator(PrivatePaths(Path("/nonexistent")), 2)
    first = asyncio.create_task(coordinator.loaded(0))
    await asyncio.sleep(0.05)
    assert not first.done()  # process 1 is still loading
    await asyncio.wait_for(coordinator.loaded(1), 5)
    await asyncio.wait_for(first, 5)
    await asyncio.wait_for(coordinator.loaded(1), 5)  # a restart later passes at once
