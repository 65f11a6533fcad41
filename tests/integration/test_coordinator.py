"""Server-wide operations across protocol processes, through the coordinator.

Three ProtocolProcessServers stand for protocol processes 0, 1 and 2 (in-process
models, in this event loop): each takes the coordinator's operations on
``operations-<i>.sock`` and serves its private REST app on ``rest-<i>.sock`` under
uvicorn, beside the coordinator's calls on ``coordinator.sock``, and the public
apps of 0 and 1 send server-wide operations through the ForwardingServerWide each
was built with, as a protocol process's do. Process 2 is down (no socket) until a test starts it and
has it catch up from the journal.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import uvicorn

from inferd.protocol import pb, pb_grpc
from inferd.server.protocol_role import OperationsHere, bind_unix, private_rest_app
from inferd.server.role_servers import ProtocolProcessServer
from inferd.server.roles import HostStart, ProtocolProcess, Role
from inferd.serving.backends import BackendChoice
from inferd.serving.operations import Load, RegisterSystemMemory, Unload
from inferd.supervisor.coordinator import Coordinator
from inferd.supervisor.coordinator_calls import coordinator_calls
from inferd.supervisor.forwarding import ForwardingServerWide, catch_up, switch_together
from inferd.supervisor.paths import PrivatePaths, ProcessRole
from inferd.triton.logsettings import SetLogLevel
from inferd.triton.shm import SharedMemoryRegistry
from inferd.workers.private_calls import Handler, close_server, serve_calls
from tests.support.models import write_model_folder
from tests.support.polling import wait_for_async

from .conftest import RUNTIMES, StartServer, rest_client, serving_grpc, settings_for

pytestmark = pytest.mark.anyio

ROW = [1, 2, 3, 4]
CUDA_REGION = {
    "raw_handle": {"b64": base64.b64encode(bytes(64)).decode()},
    "device_id": 0,
    "byte_size": 16,
}


def write_models(repository: Path) -> Path:
    write_model_folder(repository, "echo", f"{RUNTIMES}.Echo")
    return repository


@dataclass
class Process:
    """One protocol process: its server and a client of its public REST app."""

    server: ProtocolProcessServer
    public: httpx.AsyncClient
    told: list[Any]  # the control messages its pool was given (the log level)


class Cluster:
    """The coordinator and the sockets served, stopped at the end."""

    def __init__(self, folder: Path, coordinator: Coordinator, repository: Path) -> None:
        self.paths = PrivatePaths(folder)
        self.coordinator = coordinator
        self.repository = repository
        self.processes: list[Process] = []
        self._served: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []
        self._answering: list[asyncio.Server] = []

    @classmethod
    async def start(cls, folder: Path, repository: Path) -> Cluster:
        """Processes 0 and 1 up, 2 down; the coordinator knows all three."""
        paths = PrivatePaths(folder)
        coordinator = Coordinator(paths, 3)
        cluster = cls(folder, coordinator, repository)
        await cluster.answer(coordinator_calls(coordinator), paths.coordinator)
        for index in range(2):
            await cluster.start_process(index)
        return cluster

    async def answer(self, handle: Handler, socket: Path) -> None:
        self._answering.append(await serve_calls(bind_unix(socket), handle))

    async def serve(self, app: Any, socket: Path) -> None:
        config = uvicorn.Config(app, uds=str(socket), lifespan="off", log_config=None)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        self._served.append((server, task))
        await wait_for_async(lambda: server.started or task.done(), f"uvicorn on {socket}")
        if task.done():
            await task
            raise RuntimeError(f"uvicorn on {socket} stopped")

    async def start_process(self, index: int, **settings: Any) -> Process:
        """Protocol process ``index`` as a supervisor's child builds it, its models
        loaded and ready (not caught up: a test does that)."""
        told_role = ProcessRole(self.paths, index, Role.PROTOCOL, HostStart.FOR_A_LOAD)
        switch = partial(switch_together, told_role)
        role = ProtocolProcess(
            self.paths.rest(index),
            self.paths.metrics(index),
            self.paths.operations(index),
            BackendChoice(here=lambda _: True),
            told_role.start_order(),
            switch=switch,
        )
        server = ProtocolProcessServer(
            settings_for(self.repository, shared_memory_enabled=True, **settings),
            role,
            ForwardingServerWide(self.paths.coordinator),
        )
        await server.pool.start()
        if server.settings.load_models_at_startup:
            await server.dataplane.load_all()
        server.mark_ready()
        told: list[Any] = []
        tell = server.pool.control

        def recording(message: Any) -> None:
            told.append(message)
            tell(message)

        server.pool.control = recording  # type: ignore[method-assign]
        here = OperationsHere(server.dataplane, server.changes, switch)
        await self.answer(here.take, self.paths.operations(index))
        await self.serve(private_rest_app(server.dataplane), self.paths.rest(index))
        process = Process(server, rest_client(server), told)
        self.processes.append(process)
        return process

    async def stop(self) -> None:
        for process in self.processes:
            await process.public.aclose()
        for server, _ in self._served:
            server.should_exit = True
        await asyncio.gather(*(task for _, task in self._served))
        await asyncio.gather(*(close_server(server) for server in self._answering))
        for process in self.processes:
            await process.server.close()


@pytest.fixture
def private_folder() -> Iterator[Path]:
    # Under /tmp, short: a unix socket's path has at most 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="inferd-coord-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
async def cluster(
    start_inferd: StartServer, private_folder: Path, repository: Path
) -> AsyncIterator[Cluster]:
    """Processes 0 and 1 up, 2 down; the coordinator knows all three."""
    cluster = await Cluster.start(private_folder, repository)
    yield cluster
    await cluster.stop()


@pytest.fixture
def root_level() -> Iterator[None]:
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)


def grpc_stub(
    process: Process,
) -> contextlib.AbstractAsyncContextManager[pb_grpc.GRPCInferenceServiceStub]:
    """A stub of the process's public gRPC server (its edge forwards too)."""
    return serving_grpc(process.server)


def regions_of(process: Process) -> SharedMemoryRegistry:
    regions = process.server.dataplane.shared_memory
    assert regions is not None
    return regions


def unregister_every_region(cluster: Cluster) -> None:
    """Each process's regions unmapped, before the test's memory goes."""
    for process in cluster.processes:
        regions_of(process).unregister(None, "system")


def infer_body(**parameters: Any) -> dict[str, Any]:
    data = ROW if not parameters else None
    tensor = {"name": "x", "datatype": "INT32", "shape": [1, len(ROW)], "data": data}
    return {"inputs": [tensor | ({"parameters": parameters} if parameters else {})]}


async def infer(process: Process, model: str, **parameters: Any) -> httpx.Response:
    return await process.public.post(f"/v2/models/{model}/infer", json=infer_body(**parameters))


async def test_a_load_through_one_process_applies_in_every_one(
    cluster: Cluster, repository: Path
) -> None:
    first, second = cluster.processes
    write_model_folder(repository, "late", f"{RUNTIMES}.Echo")  # on disk after the start
    config = '{"max_batch_size": 8}'
    answer = await first.public.post(
        "/v2/repository/models/late/load", json={"parameters": {"config": config}}
    )
    assert answer.status_code == 200, answer.text
    for process in (first, second):
        assert (await infer(process, "late")).json()["outputs"][0]["data"] == ROW
        settings = process.server.registry.find("late").settings
        assert settings.max_batch_size == 8  # the override reached every process


async def test_an_unloaded_model_answers_in_no_process(cluster: Cluster) -> None:
    first, second = cluster.processes
    assert (await infer(second, "echo")).status_code == 200
    answer = await second.public.post("/v2/repository/models/echo/unload")
    assert answer.status_code == 200, answer.text
    for process in (first, second):
        assert not [v for v in process.server.registry.versions() if v.name == "echo"]
        refused = await infer(process, "echo")
        assert refused.status_code == 404, refused.text


async def test_a_region_registered_through_one_process_serves_an_infer_in_another(
    cluster: Cluster,
) -> None:
    first, second = cluster.processes
    memory = shared_memory.SharedMemory(create=True, size=64)
    try:
        memory.buf[:16] = b"".join(value.to_bytes(4, "little") for value in (7, 8, 9, 10))
        region = {"key": f"/{memory.name}", "byte_size": 16}
        registered = await first.public.post(
            "/v2/systemsharedmemory/region/in/register", json=region
        )
        assert registered.status_code == 200, registered.text
        answer = await infer(second, "echo", shared_memory_region="in", shared_memory_byte_size=16)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == [7, 8, 9, 10]
        status = await second.public.get("/v2/systemsharedmemory/status")
        assert [each["name"] for each in status.json()] == ["in"]
        unregistered = await second.public.post("/v2/systemsharedmemory/unregister")
        assert unregistered.status_code == 200
        assert (await first.public.get("/v2/systemsharedmemory/status")).json() == []
    finally:
        unregister_every_region(cluster)
        memory.close()
        memory.unlink()


async def test_a_log_level_change_reaches_every_process(cluster: Cluster, root_level: None) -> None:
    logging.getLogger().setLevel(logging.INFO)
    answer = await cluster.processes[1].public.post("/v2/logging", json={"log_verbose_level": 1})
    assert answer.status_code == 200 and answer.json()["log_verbose_level"] == 1
    for process in cluster.processes:
        assert process.told == [SetLogLevel(logging.DEBUG)]


async def test_statistics_are_the_sum_of_every_process(cluster: Cluster) -> None:
    first, second = cluster.processes
    for process, count in ((first, 3), (second, 2)):
        for _ in range(count):
            assert (await infer(process, "echo")).status_code == 200
    for process in (first, second):
        found = (await process.public.get("/v2/models/echo/stats")).json()["model_stats"]
        assert [model["inference_stats"]["success"]["count"] for model in found] == [5]
        assert found[0]["inference_count"] == 5
    async with grpc_stub(second) as stub:
        answer = await stub.ModelStatistics(pb.ModelStatisticsRequest(name="echo"))
        assert [model.inference_stats.success.count for model in answer.model_stats] == [5]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ModelStatistics(pb.ModelStatisticsRequest(name="nothing"))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        assert refused.value.details() == "Request for unknown model: 'nothing' is not found"


async def test_grpc_loads_and_unloads_go_through_the_coordinator_too(
    cluster: Cluster, repository: Path
) -> None:
    first, second = cluster.processes
    write_model_folder(repository, "late", f"{RUNTIMES}.Echo")
    load = pb.RepositoryModelLoadRequest(model_name="late")
    load.parameters["config"].string_param = '{"max_batch_size": 4}'
    async with grpc_stub(first) as stub:
        await stub.RepositoryModelLoad(load)
        for process in (first, second):
            assert process.server.registry.find("late").settings.max_batch_size == 4
        # It travelled as the load itself, not as a REST call.
        assert cluster.coordinator.journal.operations() == [Load("late", '{"max_batch_size": 4}')]
        await stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="late"))
        for process in (first, second):
            assert (await infer(process, "late")).status_code == 404
        assert cluster.coordinator.journal.operations() == [Unload("late")]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v2/repository/models/nothing/load", {}),
        ("POST", "/v2/repository/models/nothing/unload", None),
        ("POST", "/v2/logging", {"log_format": "xml"}),
        ("POST", "/v2/systemsharedmemory/region/r/register", {"key": "/x", "byte_size": 0}),
        ("GET", "/v2/models/nothing/stats", None),
        # A handle that opens nothing (and no GPU here): refused by each process.
        ("POST", "/v2/cudasharedmemory/region/c/register", CUDA_REGION),
    ],
)
async def test_a_refused_operation_answers_as_one_process_would(
    cluster: Cluster, method: str, path: str, body: Any
) -> None:
    first = cluster.processes[0]
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(cluster.paths.rest(0))), base_url="http://p"
    ) as private:
        alone = await private.request(method, path, json=body)
    forwarded = await first.public.request(method, path, json=body)
    assert alone.status_code >= 400, alone.text
    assert (forwarded.status_code, forwarded.json()) == (alone.status_code, alone.json())


async def test_a_partial_failure_answers_the_refusal_and_says_which_process(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = cluster.processes
    memory = shared_memory.SharedMemory(create=True, size=16)
    region = {"key": f"/{memory.name}", "byte_size": 16}
    try:
        # Process 1 holds "r" already (registered behind the coordinator's back).
        regions_of(second).register("r", region["key"], 0, 16)
        answer = await first.public.post("/v2/systemsharedmemory/region/r/register", json=region)
        assert answer.status_code == 400
        assert "already in manager" in answer.json()["error"]
        assert "Protocol process 1 refused RegisterSystemMemory(name='r'" in caplog.text
        # Process 0 applied it: the journal keeps it for a process that starts later.
        assert cluster.coordinator.journal.operations() == [
            RegisterSystemMemory("r", region["key"], 0, 16)
        ]
    finally:
        unregister_every_region(cluster)
        memory.close()
        memory.unlink()


async def test_a_process_that_starts_later_catches_up_from_the_journal(
    cluster: Cluster, start_inferd: StartServer, repository: Path, root_level: None
) -> None:
    first = cluster.processes[0]
    write_model_folder(repository, "late", f"{RUNTIMES}.Echo")
    memory = shared_memory.SharedMemory(create=True, size=16)
    region = {"key": f"/{memory.name}", "byte_size": 16}
    load = {"parameters": {"config": '{"max_batch_size": 8}'}}
    try:
        for path, body in (
            ("/v2/repository/models/late/load", load),
            ("/v2/repository/models/echo/unload", None),
            ("/v2/systemsharedmemory/region/in/register", region),
            ("/v2/logging", {"log_verbose_level": 1}),
        ):
            answer = await first.public.post(path, json=body)
            assert answer.status_code == 200, f"{path}: {answer.text}"
        # Process 2 starts as its settings make it: echo loaded, late not, no region.
        third = await cluster.start_process(2)
        assert third.server.registry.find("echo") and third.told == []
        outcome = await catch_up(ProcessRole(cluster.paths, 2, Role.PROTOCOL, HostStart.FOR_A_LOAD))
        assert outcome == {"applied": 4, "failed": []}
        assert third.server.registry.find("late").settings.max_batch_size == 8
        assert (await infer(third, "echo")).status_code == 404
        status = await third.public.get("/v2/systemsharedmemory/status")
        assert [each["name"] for each in status.json()] == ["in"]
        assert third.told == [SetLogLevel(logging.DEBUG)]
        # From now on it takes its share of every operation, as the others.
        unloaded = await first.public.post("/v2/repository/models/late/unload")
        assert unloaded.status_code == 200
        assert (await infer(third, "late")).status_code == 404
    finally:
        unregister_every_region(cluster)
        memory.close()
        memory.unlink()


async def test_a_replayed_unload_of_a_model_never_loaded_there_is_no_failure(
    cluster: Cluster, start_inferd: StartServer
) -> None:
    unloaded = await cluster.processes[0].public.post("/v2/repository/models/echo/unload")
    assert unloaded.status_code == 200
    await cluster.start_process(2, load_models_at_startup=False)
    assert await catch_up(ProcessRole(cluster.paths, 2, Role.PROTOCOL, HostStart.FOR_A_LOAD)) == {
        "applied": 1,
        "failed": [],
    }
