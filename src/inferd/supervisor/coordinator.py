"""The coordinator: server-wide operations applied in every protocol process.

The supervisor serves this app on its private ``coordinator.sock``. A protocol
process that takes a server-wide operation (supervisor/forwarding.py) sends it
here as the REST call the public API has for it; the coordinator sends the same
call to every protocol process's private ``rest-<i>.sock`` (where each applies it
to itself), waits for every answer and answers as they did (merging.py):

- one at a time: a lock orders the operations, so every process applies them in
  the same order (two loads of one model cannot end differently in two processes);
- all that answered succeeded: the first one's answer; one refused it: that
  refusal as its process gave it (status, message), logged with which process;
- a process that does not answer at all (starting, restarting) is left out and
  catches up from the journal (journal.py) before it serves its public ports:
  ``POST /coordinator/catch-up/{index}``, under the same lock, replays the
  journal to it, so no operation can slip between its replay and the next one;
- statistics are read from every process and summed;
- the model host (when one runs: process N, after the N protocol processes) takes
  every operation too, with two orders: a load reaches it first (a protocol process
  binds to the version the host has loaded: workers/host_client.py), an unload last
  (the protocol processes stop sending it requests, then it drains them). It holds
  only the models no protocol process copies, so its "no such model" to an unload
  or a statistics read is no refusal. When none runs yet, a load of a model that
  needs it starts it first (host_on_demand.py), outside the lock (the host catches
  up under it), so any model can be loaded at any time;
- the repository's changes, when ``repository_poll_secs`` is set, are found by the
  supervisor's one poller (repository_changes.py) and applied here as loads and
  unloads are: in turn, host first, journaled. A reload's protocol processes each
  load the new instances, then wait at a switch barrier
  (``POST /coordinator/switch/{id}/{index}``) that opens once every one has loaded
  (or its call ended, loaded or not): they all start serving the new version
  together, within the few milliseconds the barrier's answers take to reach them.

What a partial failure leaves: the processes that applied the operation keep it
(nothing is undone: undoing a load would unload the version that served before),
the journal records it when any process applied it (a process restarted later
matches the majority), and the client gets the error; sending it again brings
the others along.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferd.errors import InferdError
from inferd.supervisor.fanout import Answer, fan_out, send
from inferd.supervisor.host_on_demand import HostOnDemand
from inferd.supervisor.journal import (
    Call,
    Journal,
    is_server_wide,
    loaded_model,
    loads_a_model,
    reloads_from_the_repository,
    unloads_a_model,
)
from inferd.supervisor.merging import NO_PROCESS, Settled, merge_statistics, settle
from inferd.supervisor.paths import PrivatePaths

logger = logging.getLogger(__name__)

JSON = "application/json"
CATCH_UP_PREFIX = "/coordinator/catch-up"
LOADED_PREFIX = "/coordinator/loaded"
SWITCH_PREFIX = "/coordinator/switch"
_JSON_HEADERS = {"content-type": JSON}
# What a process's answer passes on to the client.
_PASSED_HEADERS = ("content-type", "retry-after")
# Triton's statistics: every model, one model, one version (routes.py).
_STATISTICS = re.compile(r"/v2/models/(?:stats|[^/]+/stats|[^/]+/versions/[^/]+/stats)")


class Coordinator:
    """The journal and the lock of one supervisor's protocol processes."""

    def __init__(
        self,
        paths: PrivatePaths,
        count: int,
        host: bool = False,
        on_demand: HostOnDemand | None = None,
    ) -> None:
        """``count`` protocol processes, and the model host as process ``count``: running
        from the start when ``host``, else started by ``on_demand`` for a load that
        needs it (None: never)."""
        self.paths = paths
        self.sockets = [paths.rest(index) for index in range(count)]
        self.host_socket = paths.rest(count)
        self.host_runs = host
        self._on_demand = on_demand
        self.journal = Journal()
        self._lock = asyncio.Lock()
        self._loaded: set[int] = set()
        self._all_loaded = asyncio.Event()
        # Awaited once every process has loaded, before any is let through to ready
        # (the supervisor gives up the REST port it answered meanwhile: loading.py).
        self.before_ready: Callable[[], Awaitable[None]] | None = None
        self._switches: dict[int, _Barrier] = {}
        self._switch_ids = itertools.count(1)

    @property
    def host(self) -> Path | None:
        """The model host's private socket, while it runs."""
        return self.host_socket if self.host_runs else None

    @property
    def _everyone(self) -> list[Path]:
        """Every process a server-wide call reaches: the protocol processes, the host last."""
        return [*self.sockets, self.host_socket] if self.host_runs else self.sockets

    async def loaded(self, index: int) -> None:
        """Process ``index`` has loaded its start-up models; returns once every
        process has. At the server's start each waits here before it says it is
        ready: one process ready while another still loads would have a client
        whose probe it answered sent to the other, and refused."""
        self._loaded.add(index)
        if len(self._loaded) == len(self.sockets) and not self._all_loaded.is_set():
            if self.before_ready is not None:
                before, self.before_ready = self.before_ready, None
                await before()
            self._all_loaded.set()
        await self._all_loaded.wait()

    async def apply(self, call: Call) -> Answer | None:
        """``call`` (a server-wide operation) in every process, in turn with every
        other operation; the answer the client gets (None: no process answered)."""
        try:
            await self._start_host_for(call)
        except InferdError as error:
            body = orjson.dumps({"error": error.message})
            return Answer(self.host_socket, 503, {"content-type": JSON}, body)
        async with self._lock:
            host = self.host  # another load may start it meanwhile: this one's is this
            answers = await self._fan_out(call, host)
            settled = settle(answers)
            self._log_settled(call, settled, answers)
            if settled.applied:
                self.journal.applied(call, next(answer.body for answer in answers if answer.ok))
        return (_host_refusal(answers) if host else None) or settled.answer

    async def _start_host_for(self, call: Call) -> None:
        """When ``call`` loads a model only the host may run and none runs yet, start
        it (it catches up under the lock: so not under it) and wait until it is ready."""
        if self.host_runs or self._on_demand is None:
            return
        load = loaded_model(call)
        if load is None or not await asyncio.to_thread(self._on_demand.needs_host, *load):
            return
        await self._on_demand.start()
        self.host_runs = True

    async def _fan_out(self, call: Call, host: Path | None) -> list[Answer]:
        """Every process's answer (the host's last, when ``host``), sent in the order
        ``call`` needs."""

        def to_all(sockets: list[Path]) -> Awaitable[list[Answer]]:
            return fan_out(sockets, call.method, call.path, call.body, _JSON_HEADERS, None)

        if host is None:
            return await self._to_protocol_processes(call)
        if loads_a_model(call.path):
            hosted = await send(host, call.method, call.path, call.body, _JSON_HEADERS)
            return [*await self._to_protocol_processes(call), hosted]
        if unloads_a_model(call.path):
            answers = await to_all(self.sockets)
            hosted = await send(host, call.method, call.path, call.body, _JSON_HEADERS)
            return [*answers, _held_nothing(hosted)]
        return await to_all([*self.sockets, host])

    async def _to_protocol_processes(self, call: Call) -> list[Answer]:
        """``call`` to every protocol process; a repository reload with a switch barrier
        that each passes once every one has loaded (or its call has ended)."""
        if not reloads_from_the_repository(call.path):
            return await fan_out(self.sockets, call.method, call.path, call.body, _JSON_HEADERS)
        number = next(self._switch_ids)
        barrier = self._switches[number] = _Barrier(set(range(len(self.sockets))))
        path = f"{call.path}?switch={number}"

        async def one(index: int, socket: Path) -> Answer:
            try:
                return await send(socket, call.method, path, call.body, _JSON_HEADERS)
            finally:
                barrier.passed(index)  # failed, refused, or switched already

        try:
            return list(await asyncio.gather(*(one(i, s) for i, s in enumerate(self.sockets))))
        finally:
            del self._switches[number]

    async def switch(self, number: int, index: int) -> None:
        """Process ``index`` has loaded what reload ``number`` brings: return once every
        process has (at once if that reload is over: nothing waits for it any more)."""
        barrier = self._switches.get(number)
        if barrier is not None:
            barrier.passed(index)
            await barrier.open.wait()

    async def statistics(self, path: str) -> Response:
        """Triton's statistics at ``path``, summed over the processes."""
        everyone = self._everyone
        answers = await fan_out(everyone, "GET", path)
        if len(everyone) > len(self.sockets):  # the host holds some models only
            answers[-1] = _held_nothing(answers[-1], b'{"model_stats": []}')
        settled = settle(answers)
        if not settled.ok:
            self._log_settled(Call("GET", path), settled, answers)
            return _response(settled.answer)
        lists = [orjson.loads(answer.body)["model_stats"] for answer in answers if answer.ok]
        body = orjson.dumps({"model_stats": merge_statistics(lists)})
        return Response(body, 200, media_type=JSON)

    async def catch_up(self, index: int) -> dict[str, Any]:
        """Replay the journal to process ``index``: how many calls it applied, and
        those it refused (each logged)."""
        socket = self.paths.rest(index)
        failed = []
        async with self._lock:
            calls = self.journal.calls()
            for call in calls:
                answer = await send(socket, call.method, call.path, call.body, _JSON_HEADERS)
                if not _reached(call, answer):
                    why = answer.error or answer.body.decode("utf-8", "replace")
                    logger.warning("%s catching up: %s: %s", self._name(index), call, why)
                    failed.append({"call": str(call), "status": answer.status, "error": why})
        return {"applied": len(calls) - len(failed), "failed": failed}

    def _name(self, index: int) -> str:
        return "The model host" if index == len(self.sockets) else f"Protocol process {index}"

    def _log_settled(self, call: Call, settled: Settled, answers: list[Answer]) -> None:
        for index in settled.failed:
            why = answers[index].body.decode("utf-8", "replace")
            status = answers[index].status
            logger.warning("%s refused %s (%d): %s", self._name(index), call, status, why)
        for index in settled.unreached:
            logger.warning(
                "%s did not answer %s (%s); it catches up when it starts",
                self._name(index),
                call,
                answers[index].error,
            )


class _Barrier:
    """Opens once every process of ``waiting`` has passed."""

    def __init__(self, waiting: set[int]) -> None:
        self.waiting = waiting
        self.open = asyncio.Event()
        if not waiting:
            self.open.set()

    def passed(self, index: int) -> None:
        self.waiting.discard(index)
        if not self.waiting:
            self.open.set()


def _reached(call: Call, answer: Answer) -> bool:
    """Whether the process is where ``call`` leaves it: it applied the call, or the
    call unloads a model it does not hold (it did not load it at start-up)."""
    return answer.ok or (answer.status == 404 and unloads_a_model(call.path))


def _host_refusal(answers: list[Answer]) -> Answer | None:
    """The host's refusal (its answer is the last), which says why better than a
    protocol process's (which found the host's version unavailable); None when the
    host did not refuse."""
    hosted = answers[-1]
    return hosted if hosted.status and not hosted.ok else None


def _held_nothing(answer: Answer, body: bytes = b"{}") -> Answer:
    """The model host's "no such model": it holds only the models no protocol process
    copies, so for the others that is no refusal (an unload, a statistics read)."""
    if answer.status != 404:
        return answer
    return dataclasses.replace(answer, status=200, body=body)


def _response(answer: Answer | None) -> Response:
    if answer is None:
        return Response(orjson.dumps({"error": NO_PROCESS}), 503, media_type=JSON)
    headers = {name: answer.headers[name] for name in _PASSED_HEADERS if name in answer.headers}
    return Response(answer.body, answer.status, headers=headers)


def _raw_path(request: Request) -> str:
    """The path as the process sent it (a model name stays percent-encoded)."""
    raw = request.scope.get("raw_path")
    return raw.decode("ascii") if raw else request.url.path


def _not_served(request: Request) -> Response:
    message = f"{request.method} {request.url.path} is not a server-wide operation"
    return Response(orjson.dumps({"error": message}), 404, media_type=JSON)


def build_coordinator_app(
    paths: PrivatePaths, count: int, host: bool = False, on_demand: HostOnDemand | None = None
) -> Starlette:
    """The coordinator of protocol processes 0..count-1 (their sockets in ``paths``)
    and of the model host (from the start with ``host``, else when ``on_demand``
    starts it), as an ASGI app; ``app.state.coordinator`` holds its journal."""
    return coordinator_app(Coordinator(paths, count, host, on_demand))


def coordinator_app(coordinator: Coordinator) -> Starlette:
    """``coordinator`` served as an ASGI app (``app.state.coordinator``)."""

    async def operation(request: Request) -> Response:
        path = _raw_path(request)
        if request.method == "POST" and is_server_wide(path):
            call = Call("POST", path, await request.body())
            return _response(await coordinator.apply(call))
        if request.method == "GET" and _STATISTICS.fullmatch(path):
            return await coordinator.statistics(path)
        return _not_served(request)

    async def catch_up(request: Request) -> Response:
        outcome = await coordinator.catch_up(request.path_params["index"])
        return Response(orjson.dumps(outcome), 200, media_type=JSON)

    async def loaded(request: Request) -> Response:
        await coordinator.loaded(request.path_params["index"])
        return Response(b"{}", 200, media_type=JSON)

    async def switch(request: Request) -> Response:
        await coordinator.switch(request.path_params["number"], request.path_params["index"])
        return Response(b"{}", 200, media_type=JSON)

    app = Starlette(
        routes=[
            Route(f"{CATCH_UP_PREFIX}/{{index:int}}", catch_up, methods=["POST"]),
            Route(f"{LOADED_PREFIX}/{{index:int}}", loaded, methods=["POST"]),
            Route(f"{SWITCH_PREFIX}/{{number:int}}/{{index:int}}", switch, methods=["POST"]),
            Route("/v2/{path:path}", operation, methods=["GET", "POST"]),
        ]
    )
    app.state.coordinator = coordinator
    return app
