"""The coordinator with a model host (process N after N protocol processes): a load
reaches the host first, an unload last, and the host's "no such model" to an unload
or a statistics read is no refusal.

Three small apps on unix sockets stand for protocol processes 0 and 1 and the host
(process 2); each records when an operation (its class's name) reached it and
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
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferd.errors import InferdError, InvalidRequest, ModelNotFound
from inferd.server.protocol_role import MSGPACK, OPERATION_PATH
from inferd.serving.operations import (
    ChangeLogSettings,
    Load,
    ReadStatistics,
    Unload,
    decode_operation,
    encode,
    refusal_of,
)
from inferd.supervisor.coordinator_app import build_coordinator_app
from inferd.supervisor.forwarding import call_coordinator
from inferd.supervisor.messages import CatchUp
from inferd.supervisor.paths import PrivatePaths
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio

HOST = 2


class Recorder:
    """What reached each process, in order, and what each answers."""

    def __init__(self) -> None:
        self.reached: list[tuple[int, str]] = []
        self.refusals: dict[tuple[int, str], InferdError] = {}

    def app(self, index: int) -> Starlette:
        async def operation(request: Request) -> Response:
            kind = type(decode_operation(await request.body())).__name__
            self.reached.append((index, kind))
            await asyncio.sleep(0.01)  # operations sent at once would interleave here
            refusal = self.refusals.get((index, kind))
            if refusal is not None:
                status = 404 if isinstance(refusal, ModelNotFound) else 400
                return Response(encode(refusal_of(refusal, status)), status, media_type=MSGPACK)
            return Response(encode(self.value(kind, index)), 200, media_type=MSGPACK)

        return Starlette(routes=[Route(OPERATION_PATH, operation, methods=["POST"])])

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
    apps = [(recorder.app(i), paths.rest(i)) for i in range(3)]
    apps.append((build_coordinator_app(paths, 2, host=True), paths.coordinator))
    servers = []
    for app, socket in apps:
        server = uvicorn.Server(
            uvicorn.Config(app, uds=str(socket), lifespan="off", log_config=None)
        )
        servers.append((server, asyncio.create_task(server.serve())))
        await wait_for_async(lambda server=server: server.started, f"uvicorn on {socket}")
    # A host catches up from the journal as it starts, and a load waits for that
    # (HOST_CATCH_UP_WAIT_SECONDS) before it is applied; so does this one.
    await call_coordinator(paths.coordinator, CatchUp(HOST))
    yield paths.coordinator, recorder
    for server, _ in servers:
        server.should_exit = True
    await asyncio.gather(*(task for _, task in servers))


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
    PrivatePaths(folder).rest(0).unlink()  # process 0 is restarting: nothing listens
    summed = await call_coordinator(coordinator, ReadStatistics("m"))
    assert summed == [{"name": "m", "version": "1", "inference_count": 2 + 3}]
    await call_coordinator(coordinator, Load("m"))  # it catches up when it starts
    assert sorted(index for index, kind in recorder.reached if kind == "Load") == [1, HOST]
