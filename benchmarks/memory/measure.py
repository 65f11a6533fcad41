"""One run: start a server with some ``parallel_workers``, time it to the model READY,
read its tree's memory, have it answer, read the memory again, stop it."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common.serverproc import ServerProcess, free_ports

from ..repository import settings_json, write_json
from ..scenarios.base import VerificationError
from ..servers import INFERD, Programs, start
from .model import MODEL_NAME, ForestModel
from .options import API, POLL, REQUEST, START, MemoryOptions, MemoryServer
from .pss import TreeMemory, tree_memory

ANSWER_TIMEOUT_S = 30.0
READY_PATH = f"/v2/models/{MODEL_NAME}/ready"
SERVER_READY_PATH = "/v2/health/ready"
# What a server that loads the model after its start sets: the poll finds the folder
# within a second; a request loads what it names.
LATER_SETTINGS: dict[str, dict[str, Any]] = {
    POLL: {"repository_poll_secs": 1},
    REQUEST: {"load_on_request": True},
}


@dataclass(frozen=True)
class RunRecord:
    """One server at one ``parallel_workers`` value, in one round."""

    round: int
    server: str
    workers: int
    ready_s: float  # from the process's start to the model's ready endpoint answering 200
    answers: int  # checked answers between the two readings
    answer_p50_ms: float
    at_ready: TreeMemory  # the tree as the model became READY
    served: TreeMemory  # the tree after the answers: the figure reported
    # How the model was loaded (options.LOADS): "start", or after the start ("api",
    # "poll", "request"), where ready_s is the load's own time (from the folder
    # written to the model ready), and first_answer_ms the first request after it.
    load: str = "start"
    first_answer_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "server": self.server,
            "workers": self.workers,
            "load": self.load,
            "first_answer_ms": self.first_answer_ms,
            "ready_s": round(self.ready_s, 3),
            "answers": self.answers,
            "answer_p50_ms": round(self.answer_p50_ms, 2),
            "pss_mib": round(self.served.pss_mib, 1),
            "processes": len(self.served.processes),
            "at_ready": self.at_ready.to_dict(),
            "served": self.served.to_dict(),
        }


def run_one(
    options: MemoryOptions,
    server: MemoryServer,
    workers: int,
    model: ForestModel,
    round_index: int,
    repo: Path,
) -> RunRecord:
    ports = free_ports(3)
    settings: dict[str, Any] = {"parallel_workers": workers}
    processes = 1
    if server.kind == INFERD:  # named both ways: the comparison must not follow the default
        settings["fork_workers"] = server.fork_workers
        if options.protocol_axis:  # inferd's defaults: the model copied into each process
            settings, processes = {"fork_workers": server.fork_workers}, workers
            settings["fork_protocol_processes"] = server.fork_protocol_processes
    settings |= LATER_SETTINGS.get(server.load, {})
    write_json(repo / "settings.json", settings_json(ports, settings))
    if server.load == START:
        model.write(repo, server.implementation)
    programs = Programs(options.inferd_python, options.inferd_src, options.mlserver_python)
    # One protocol process unless that is the axis: what each worker costs is the
    # question (with several, each would hold the model in-process and
    # parallel_workers would not apply).
    process = start(server.contender, programs, repo, ports, protocol_processes=processes)
    first_ms = None
    try:
        if server.load == START:
            ready_s = process.wait_until(READY_PATH, timeout=options.ready_timeout)
        else:
            process.wait_until(SERVER_READY_PATH, timeout=options.ready_timeout)
            ready_s, first_ms = load_later(process, server, model, options.ready_timeout)
        at_ready = tree_memory(process.process.pid)
        connections = max(1, workers)  # enough at once that every worker may get some
        times = asyncio.run(answer(process, model, connections, options.requests_per_worker))
        served = tree_memory(process.process.pid)
        if process.process.poll() is not None:
            raise RuntimeError(f"{process.describe()} exited:\n{process.log()[-2000:]}")
    finally:
        process.stop()
    return RunRecord(
        round=round_index,
        server=server.label,
        workers=workers,
        ready_s=ready_s,
        answers=len(times),
        answer_p50_ms=statistics.median(times) * 1000,
        at_ready=at_ready,
        served=served,
        load=server.load,
        first_answer_ms=first_ms,
    )


def load_later(
    process: ServerProcess, server: MemoryServer, model: ForestModel, timeout: float
) -> tuple[float, float]:
    """Put the model's folder into the served repository (whole, by a rename: a poll
    never sees half of it) and load it as ``server.load`` says: through the repository
    API, by the poll, or by a first request. The seconds from the folder written to
    the model ready, and the first answer's milliseconds after that."""
    repo = process.repository
    staging = repo.parent / f"{repo.name}-staging"
    model.write(staging, server.implementation)
    began = time.perf_counter()
    (staging / MODEL_NAME).rename(repo / MODEL_NAME)
    url = f"http://127.0.0.1:{process.http_port}"
    if server.load == API:
        loaded = httpx.post(f"{url}/v2/repository/models/{MODEL_NAME}/load", timeout=timeout)
        if loaded.status_code != 200:
            raise RuntimeError(f"the load was refused: {loaded.status_code} {loaded.text}")
    elif server.load == POLL:
        process.wait_until(READY_PATH, timeout=timeout)
    else:  # a request's load: its answer
        _answer(url, model, timeout)
    load_s = time.perf_counter() - began
    began = time.perf_counter()
    _answer(url, model, timeout)
    return load_s, (time.perf_counter() - began) * 1000


def _answer(url: str, model: ForestModel, timeout: float) -> None:
    answer = httpx.post(f"{url}/v2/models/{MODEL_NAME}/infer", content=model.request_body(),
                        headers={"content-type": "application/json"}, timeout=timeout)  # fmt: skip
    model.check(answer.status_code, answer.content)


async def answer(
    server: ServerProcess, model: ForestModel, connections: int, each: int
) -> list[float]:
    """``each`` requests over each of ``connections`` connections at once, every answer
    checked; the seconds each took."""
    # Imported here: ``python -m benchmarks`` picks the inferd tree before inferd loads.
    from inferd.tools.leanhttp import LeanHttpConnection
    from inferd.tools.v2client import Endpoint, http_post, infer_path

    endpoint = Endpoint("127.0.0.1", server.http_port)
    request = http_post(endpoint, infer_path(MODEL_NAME), model.request_body())

    async def one_connection() -> list[float]:
        connection = LeanHttpConnection(endpoint, ANSWER_TIMEOUT_S)
        took: list[float] = []
        try:
            for _ in range(each):
                began = time.perf_counter()
                reply = await connection.exchange(request)
                took.append(time.perf_counter() - began)
                if reply.error:
                    raise VerificationError(f"{MODEL_NAME}: no answer: {reply.error}")
                model.check(reply.status, reply.body)
        finally:
            await connection.close()
        return took

    tallies = await asyncio.gather(*(one_connection() for _ in range(connections)))
    return [seconds for tally in tallies for seconds in tally]
