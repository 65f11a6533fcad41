"""The coordinator with a model host (process N after N protocol processes): a load
reaches the host first, an unload last, and the host's "no such model" to an unload
or a statistics read is no refusal.

Three small handlers of private calls stand for protocol processes 0 and 1 and the
host (process 2); each records when an operation (its class's name) reached it and
answers as a test says.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import InferdError, InvalidRequest, ModelNotFound
from inferd.server.protocol_role import bind_unix
from inferd.serving.operations import ChangeLogSettings, Load, ReadStatistics, Unload
from inferd.supervisor.coordinator import Coordinator
from inferd.supervisor.coordinator_calls import coordinator_calls
from inferd.supervisor.forwarding import call_coordinator
from inferd.supervisor.messages import CatchUp
from inferd.supervisor.paths import PrivatePaths
from inferd.workers.private_calls import Handler, close_server, serve_calls

pytestmark = pytest.mark.anyio

HOST = 2


class Recorder:
    """What reached each process, in order, and what each answers."""

    def __init__(self) -> None:
        self.reached: list[tuple[int, str]] = []
        self.refusals: dict[tuple[int, str], InferdError] = {}

    def handler(self, index: int) -> Handler:
        async def operation(message: Any) -> Any:
            kind = type(message).__name__
            self.reached.append((index, kind))
            await asyncio.sleep(0.01)  # operations sent at once would interleave here
            refusal = self.refusals.get((index, kind))
            if refusal is not None:
                raise refusal
            return self.value(kind, index)

        return operation

    @staticmethod
    def value(kind: str, index: int) -> Any:
        if kind == "ReadStatistics":
            return [{"name": "m", "version": "1", "inference_count": index + 1}]
        return {} if kind == "ChangeLogSettings" else None


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="inferd-host-"))  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def setup(folder: Path) -> AsyncIterator[tuple[Path, Recorder]]:
    paths = PrivatePaths(folder)
    recorder = Recorder()
    handlers = [(recorder.handler(i), paths.operations(i)) for i in range(3)]
    coordinator = Coordinator(paths, 2, host=True)
    handlers.append((coordinator_calls(coordinator), paths.coordinator))
    servers = [await serve_calls(bind_unix(socket), handle) for handle, socket in handlers]
    # A host catches up from the journal as it starts, and a load waits for that
    # (HOST_CATCH_UP_WAIT_SECONDS) before it is applied; so does this one.
    await call_coordinator(paths.coordinator, CatchUp(HOST))
    yield paths.coordinator, recorder
    await asyncio.gather(*(close_server(server) for server in servers))


async def test_a_load_reaches_the_host_before_any_protocol_process(setup: Any) -> None:
    coordinator, recorder = setup
    await call_coordinator(coordinator, Load("m"))
    assert recorder.reached[0] == (HOST, "Load")
    assert sorted(index for index, _ in recorder.reached[1:]) == [0, 1]


async def test_an_unload_reaches_the_host_last_and_its_not_found_is_no_refusal(
    setup: Any,
) -> None:
    coordinator, recorder = setup
    recorder.refusals[(HOST, "Unload")] = ModelNotFound("m")
    await call_coordinator(coordinator, Unload("m"))
    assert recorder.reached[-1] == (HOST, "Unload")
    assert sorted(index for index, _ in recorder.reached[:-1]) == [0, 1]


async def test_the_hosts_refusal_of_a_load_is_what_the_client_gets(setup: Any) -> None:
    coordinator, recorder = setup
    recorder.refusals[(HOST, "Load")] = InvalidRequest("failed to load 'm': the GPU is gone")
    recorder.refusals[(0, "Load")] = InvalidRequest("failed to load 'm': unavailable")
    with pytest.raises(InvalidRequest, match="the GPU is gone"):
        await call_coordinator(coordinator, Load("m"))


async def test_statistics_sum_the_host_and_skip_its_not_found(setup: Any) -> None:
    coordinator, recorder = setup
    summed = await call_coordinator(coordinator, ReadStatistics("m"))
    assert summed[0]["inference_count"] == 1 + 2 + 3
    recorder.refusals[(HOST, "ReadStatistics")] = ModelNotFound("m")
    summed = await call_coordinator(coordinator, ReadStatistics("m"))
    assert summed[0]["inference_count"] == 1 + 2


async def test_other_operations_reach_every_process_and_the_host(setup: Any) -> None:
    coordinator, recorder = setup
    await call_coordinator(coordinator, ChangeLogSettings({"log_info": False}))
    assert sorted(index for index, _ in recorder.reached) == [0, 1, HOST]


async def test_a_process_that_does_not_answer_is_left_out_of_a_read_and_an_operation(
    setup: Any, folder: Path
) -> None:
    coordinator, recorder = setup
    PrivatePaths(folder).operations(0).unlink()  # process 0 is restarting: nothing listens
    summed = await call_coordinator(coordinator, ReadStatistics("m"))
    assert summed == [{"name": "m", "version": "1", "inference_count": 2 + 3}]
    await call_coordinator(coordinator, Load("m"))  # it catches up when it starts
    assert sorted(index for index, kind in recorder.reached if kind == "Load") == [1, HOST]
