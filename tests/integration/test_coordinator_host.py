"""The coordinator with a model host (process N after N protocol processes): a load
reaches the host first, an unload last, and the host's "no such model" to an unload
or a statistics read is no refusal.

Three small apps on unix sockets stand for protocol processes 0 and 1 and the host
(process 2); each records when a call reached it and answers as a test says.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferd.supervisor.coordinator import build_coordinator_app
from inferd.supervisor.paths import PrivatePaths
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio

HOST = 2


class Recorder:
    """What reached each process, in order, and what each answers."""

    def __init__(self) -> None:
        self.reached: list[tuple[int, str]] = []
        self.answers: dict[tuple[int, str], tuple[int, dict[str, Any]]] = {}

    def app(self, index: int) -> Starlette:
        async def any_call(request: Request) -> Response:
            path = request.url.path
            self.reached.append((index, path))
            await asyncio.sleep(0.01)  # calls sent at once would interleave here
            status, body = self.answers.get((index, path), (200, self.ok_body(path, index)))
            return Response(orjson.dumps(body), status, media_type="application/json")

        return Starlette(routes=[Route("/{path:path}", any_call, methods=["GET", "POST"])])

    @staticmethod
    def ok_body(path: str, index: int) -> dict[str, Any]:
        if path.endswith("/stats"):
            stats = {"name": "m", "version": "1", "inference_count": index + 1}
            return {"model_stats": [stats]}
        return {}


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="inferd-host-"))  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def setup(folder: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Recorder]]:
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
    transport = httpx.AsyncHTTPTransport(uds=str(paths.coordinator))
    async with httpx.AsyncClient(transport=transport, base_url="http://coordinator") as client:
        yield client, recorder
    for server, _ in servers:
        server.should_exit = True
    await asyncio.gather(*(task for _, task in servers))


async def test_a_load_reaches_the_host_before_any_protocol_process(setup: Any) -> None:
    client, recorder = setup
    response = await client.post("/v2/repository/models/m/load")
    assert response.status_code == 200
    assert recorder.reached[0] == (HOST, "/v2/repository/models/m/load")
    assert sorted(index for index, _ in recorder.reached[1:]) == [0, 1]


async def test_an_unload_reaches_the_host_last_and_its_not_found_is_no_refusal(
    setup: Any,
) -> None:
    client, recorder = setup
    path = "/v2/repository/models/m/unload"
    recorder.answers[(HOST, path)] = (404, {"error": "Model 'm' not found"})
    response = await client.post(path)
    assert response.status_code == 200, response.text
    assert recorder.reached[-1] == (HOST, path)
    assert sorted(index for index, _ in recorder.reached[:-1]) == [0, 1]


async def test_the_hosts_refusal_of_a_load_is_what_the_client_gets(setup: Any) -> None:
    client, recorder = setup
    path = "/v2/repository/models/m/load"
    recorder.answers[(HOST, path)] = (400, {"error": "failed to load 'm': the GPU is gone"})
    recorder.answers[(0, path)] = (503, {"error": "failed to load 'm': unavailable"})
    response = await client.post(path)
    assert response.status_code == 400
    assert "the GPU is gone" in response.json()["error"]


async def test_statistics_sum_the_host_and_skip_its_not_found(setup: Any) -> None:
    client, recorder = setup
    summed = (await client.get("/v2/models/m/stats")).json()["model_stats"]
    assert summed[0]["inference_count"] == 1 + 2 + 3
    recorder.answers[(HOST, "/v2/models/m/stats")] = (404, {"error": "Model 'm' not found"})
    summed = (await client.get("/v2/models/m/stats")).json()["model_stats"]
    assert summed[0]["inference_count"] == 1 + 2


async def test_other_operations_reach_every_process_and_the_host(setup: Any) -> None:
    client, recorder = setup
    response = await client.post("/v2/logging", json={"log_info": False})
    assert response.status_code == 200
    assert sorted(index for index, _ in recorder.reached) == [0, 1, HOST]
