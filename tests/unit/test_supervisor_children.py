"""The supervisor's restarts and what it tells a protocol process (supervisor/)."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from inferd.errors import ConfigurationError
from inferd.host.placement import Placement
from inferd.host.process import HostKeeper, ModelHostServer, host_server
from inferd.server.app import InferenceServer
from inferd.server.role_servers import ProtocolProcessServer
from inferd.server.roles import HostStart, Role, start_order
from inferd.serving.server_wide import LocalServerWide
from inferd.settings import ServerSettings
from inferd.supervisor.child import protocol_server, protocol_settings
from inferd.supervisor.children import (
    CONFIGURATION_EXIT_STATUS,
    Backoff,
    Child,
    ChildProcess,
    describe_exit,
    environment_of_children,
)
from inferd.supervisor.forwarding import ForwardingServerWide
from inferd.supervisor.paths import PrivatePaths, ProcessRole, process_role, role_environment
from tests.support.polling import wait_for_async


def test_the_pause_doubles_while_a_process_keeps_dying_soon() -> None:
    backoff = Backoff()
    pauses = [backoff.pause_after(uptime=1.0) for _ in range(7)]
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_a_minute_up_brings_the_first_pause_back() -> None:
    backoff = Backoff()
    for _ in range(4):
        backoff.pause_after(uptime=0.1)
    assert backoff.pause_after(uptime=60.0) == 0.5
    assert backoff.pause_after(uptime=0.1) == 1.0


def test_an_exit_says_its_code_or_its_signal() -> None:
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-signal.SIGKILL) == "signal SIGKILL"
    assert describe_exit(-200) == "signal 200"


def test_a_child_is_told_the_private_folder_and_reads_its_role(tmp_path: Path) -> None:
    paths = PrivatePaths(tmp_path)
    environment = environment_of_children(paths)
    told = role_environment(Role.MODEL_HOST, HostStart.FOR_A_LOAD)
    role = process_role({**environment, **told, "INFERD_PROTOCOL_INDEX": "3"})
    assert role == ProcessRole(paths, 3, Role.MODEL_HOST, HostStart.FOR_A_LOAD)
    told = role_environment(Role.PROTOCOL, HostStart.WITH_SERVER)
    role = process_role({**environment, **told, "INFERD_PROTOCOL_INDEX": "0"})
    assert role == ProcessRole(paths, 0, Role.PROTOCOL, HostStart.WITH_SERVER)
    assert process_role({}) is None


def test_each_role_starts_in_its_order() -> None:
    """The public side first at the server's start (live while the models load), last
    in a restart; a host started for a load loads nothing of its own (it catches up)."""
    first = start_order(Role.PROTOCOL, HostStart.WITH_SERVER, restarted=False)
    assert [step.name for step in first] == [
        "WORKERS",
        "PRIVATE",
        "PUBLIC",
        "MODELS",
        "CATCH_UP",
        "READY",
    ]
    again = start_order(Role.PROTOCOL, HostStart.FOR_A_LOAD, restarted=True)
    assert [step.name for step in again] == [
        "WORKERS",
        "PRIVATE",
        "MODELS",
        "CATCH_UP",
        "PUBLIC",
        "READY",
    ]
    assert start_order(Role.MODEL_HOST, HostStart.WITH_SERVER, restarted=False) == first
    later = start_order(Role.MODEL_HOST, HostStart.FOR_A_LOAD, restarted=False)
    assert [step.name for step in later] == ["PRIVATE", "PUBLIC", "CATCH_UP", "READY"]
    later_again = start_order(Role.MODEL_HOST, HostStart.FOR_A_LOAD, restarted=True)
    assert [step.name for step in later_again] == ["PRIVATE", "CATCH_UP", "PUBLIC", "READY"]


def test_a_protocol_process_runs_its_models_in_process(tmp_path: Path) -> None:
    settings = ServerSettings(model_repository_root=str(tmp_path), parallel_workers=4)
    assert protocol_settings(settings).parallel_workers == 0
    role = ProcessRole(PrivatePaths(tmp_path), 1, Role.PROTOCOL, HostStart.FOR_A_LOAD)
    server = protocol_server(settings, role, Placement())
    assert server.settings.parallel_workers == 0
    assert server.role is not None
    assert server.role.rest_socket == tmp_path / "rest-1.sock"
    assert server.role.metrics_socket == tmp_path / "metrics-1.sock"


def test_each_kind_of_server_is_built_knowing_where_its_operations_go(tmp_path: Path) -> None:
    """Three compositions of the same parts, nothing replaced after construction: a
    lone server applies server-wide operations itself; a protocol process sends them
    to the coordinator (a request's load on request too); the host takes them from it."""
    settings = ServerSettings(model_repository_root=str(tmp_path), load_on_request=True)
    paths = PrivatePaths(tmp_path)
    lone = InferenceServer(settings)
    assert isinstance(lone.server_wide, LocalServerWide)
    role = ProcessRole(paths, 0, Role.PROTOCOL, HostStart.FOR_A_LOAD)
    process = protocol_server(settings, role, Placement())
    assert isinstance(process, ProtocolProcessServer)
    assert isinstance(process.server_wide, ForwardingServerWide)
    assert process.server_wide.coordinator == paths.coordinator
    assert process.dataplane.on_demand is not None
    assert process.dataplane.on_demand.forward == process.server_wide.load_on_request
    role = ProcessRole(paths, 2, Role.MODEL_HOST, HostStart.WITH_SERVER)
    host = host_server(settings, role, Placement())
    assert isinstance(host, ModelHostServer) and isinstance(host.server_wide, LocalServerWide)
    assert host.host_socket == paths.host
    assert host.dataplane.on_demand is not None and host.dataplane.on_demand.max_loaded == 0
    for server in (process, host):
        assert server.dataplane.models_ready_once_started
    assert not lone.dataplane.models_ready_once_started


def exiting_child(tmp_path: Path, status: int) -> Child:
    """Protocol process 0 as a command that notes each start in ``starts`` and exits
    with ``status`` at once, as one that fails at start-up does."""
    note = f"open({str(tmp_path / 'starts')!r}, 'a').write('started\\n')"
    command = [sys.executable, "-c", f"import sys; {note}; sys.exit({status})"]
    paths = PrivatePaths(tmp_path)
    return Child(0, command, environment_of_children(paths), paths)


@pytest.mark.anyio
async def test_a_process_that_cannot_start_with_the_settings_is_not_restarted(
    tmp_path: Path,
) -> None:
    child = exiting_child(tmp_path, CONFIGURATION_EXIT_STATUS)
    with pytest.raises(ConfigurationError, match="Protocol process 0 could not start"):
        await asyncio.wait_for(child.keep_running(), timeout=30)
    assert (tmp_path / "starts").read_text() == "started\n"


@pytest.mark.anyio
async def test_a_process_that_crashes_at_start_is_started_again(tmp_path: Path) -> None:
    child = exiting_child(tmp_path, 1)  # how Python exits on an uncaught exception
    watching = asyncio.create_task(child.keep_running())

    async def started_twice() -> bool:
        starts = tmp_path / "starts"
        return starts.exists() and starts.read_text().count("started") >= 2

    await wait_for_async(started_twice, "a second start", timeout=30, interval=0.05)
    child.stop()
    await asyncio.wait_for(watching, timeout=30)  # stopped, not raised


@pytest.mark.anyio
async def test_the_model_host_is_forked_in_its_role_else_spawned(tmp_path: Path) -> None:
    """host/process.py HostKeeper: forked by the protocol fork parent with the host's
    environment (its index after the protocol processes', its role); spawned when that
    fork gives none (no parent runs, or it could not fork)."""
    asked: list[dict[str, str]] = []

    async def fork(environment: Mapping[str, str]) -> ChildProcess | None:
        asked.append(dict(environment))
        return None

    spawned = tmp_path / "spawned"
    command = [sys.executable, "-c", f"open({str(spawned)!r}, 'a').write('spawned')"]
    keeper = HostKeeper(2, command, PrivatePaths(tmp_path), HostStart.FOR_A_LOAD, fork)
    kept = keeper.start()

    async def spawned_instead() -> bool:
        return bool(asked) and spawned.exists()

    await wait_for_async(spawned_instead, "a spawned host", timeout=30, interval=0.05)
    assert keeper.child is not None
    keeper.child.stop()
    await asyncio.wait_for(kept, timeout=30)
    role = process_role(asked[0])
    assert role is not None and role.role is Role.MODEL_HOST and role.index == 2
    assert role.host_start is HostStart.FOR_A_LOAD and not role.restarted
