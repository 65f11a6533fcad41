"""What the coordinator's hop adds to a server-wide operation (``protocol_processes`` > 1).

Times three operations, each ``--repeat`` times per round, as medians over rounds:
a statistics read, a log settings change and a reload of a small model, done
through the public REST app of a lone server (applied to itself) and of protocol
process 0 among ``--processes`` (forwarded to the coordinator, which sends them to
every process's private socket). All servers run in this one event loop, with
in-process models, on unix sockets as the supervisor's: the processes' answers
are computed one after the other here where separate processes would compute
them at once, so the figures bound the cost from above.

    python -m benchmarks.coordinator_cost [--processes 2 4] [--repeat 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from benchmarks.common.models import write_model_folder
from inferd.server.app import InferenceServer
from inferd.server.parts import ServerParts
from inferd.server.protocol_role import ProtocolProcess, private_rest_app
from inferd.server.role_servers import ProtocolProcessServer
from inferd.serving.backends import BackendChoice
from inferd.settings import ServerSettings
from inferd.supervisor.coordinator import build_coordinator_app
from inferd.supervisor.forwarding import ForwardingServerWide
from inferd.supervisor.paths import PrivatePaths

ECHO = "tests.integration.runtimes.Echo"
Operation = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]
OPERATIONS: dict[str, Operation] = {
    "statistics read": lambda client: client.get("/v2/models/stats"),
    "log settings change": lambda client: client.post("/v2/logging", json={"log_info": True}),
    "model reload": lambda client: client.post("/v2/repository/models/echo/load"),
}


async def started_server(
    repository: Path, paths: PrivatePaths | None = None, index: int = 0
) -> ServerParts:
    """A lone server (``paths`` None), else protocol process ``index`` of ``paths``."""
    settings = ServerSettings(model_repository_root=str(repository), parallel_workers=0)
    if paths is None:
        server: ServerParts = InferenceServer(settings)
    else:
        role = ProtocolProcess(
            paths.rest(index), paths.metrics(index), BackendChoice(lambda _: True)
        )
        server = ProtocolProcessServer(settings, role, ForwardingServerWide(paths.coordinator))
    await server.pool.start()
    await server.dataplane.load_all()
    server.mark_ready()
    return server


async def serve(app: Any, socket: Path) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    server = uvicorn.Server(
        uvicorn.Config(app, uds=str(socket), lifespan="off", log_config=None, access_log=False)
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            raise RuntimeError(f"uvicorn on {socket} stopped")
        await asyncio.sleep(0.005)
    return server, task


async def median_ms(client: httpx.AsyncClient, operation: Operation, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = await operation(client)
        times.append(time.perf_counter() - started)
        answer.raise_for_status()
    return statistics.median(times) * 1e3


async def measure(repository: Path, processes: int, repeat: int) -> dict[str, float]:
    """Each operation's median ms through process 0 (``processes`` 0: a lone server)."""
    served = []
    with tempfile.TemporaryDirectory(prefix="inferd-coord-") as folder:
        paths = PrivatePaths(Path(folder))
        if not processes:
            servers = [await started_server(repository)]
        else:
            servers = [await started_server(repository, paths, i) for i in range(processes)]
        try:
            if processes:
                served.append(
                    await serve(build_coordinator_app(paths, processes), paths.coordinator)
                )
                for index, server in enumerate(servers):
                    app = private_rest_app(server.dataplane, server.changes)
                    served.append(await serve(app, paths.rest(index)))
            transport = httpx.ASGITransport(app=servers[0].rest_app())
            async with httpx.AsyncClient(transport=transport, base_url="http://inferd") as client:
                return {
                    name: await median_ms(client, operation, repeat)
                    for name, operation in OPERATIONS.items()
                }
        finally:
            for server, _ in served:
                server.should_exit = True
            await asyncio.gather(*(task for _, task in served))
            for each in servers:
                await each.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=20, help="operations per round")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    logging.getLogger().setLevel(logging.WARNING)
    counts = [0, *options.processes]
    rounds: dict[int, list[dict[str, float]]] = {count: [] for count in counts}
    with tempfile.TemporaryDirectory() as temporary:
        repository = Path(temporary)
        write_model_folder(repository, "echo", ECHO)
        for _ in range(options.rounds):
            for count in counts:
                rounds[count].append(asyncio.run(measure(repository, count, options.repeat)))
    print(f"median ms per operation through process 0; medians over {options.rounds} rounds")
    print(f"{'operation':<22}" + "".join(f"{label(count):>14}" for count in counts))
    for name in OPERATIONS:
        row = [statistics.median(each[name] for each in rounds[count]) for count in counts]
        print(f"{name:<22}" + "".join(f"{value:>14.2f}" for value in row))


def label(count: int) -> str:
    return "lone server" if not count else f"{count} processes"


if __name__ == "__main__":
    main()
