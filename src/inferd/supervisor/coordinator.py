"""The coordinator: server-wide operations applied in every protocol process.

The supervisor serves this app on its private ``coordinator.sock``. A protocol
process that takes a server-wide operation (supervisor/forwarding.py) sends it
here as its typed message (serving/operations.py); the coordinator sends the same
message to every protocol process's private ``rest-<i>.sock`` (where each applies
it to itself), waits for every answer and answers as they did (merging.py):

- one at a time: a lock orders the operations, so every process applies them in
  the same order (two loads of one model cannot end differently in two processes);
- all that answered succeeded: the first one's answer; one refused it: that
  refusal as its process gave it (``Refusal``: the error's class, message and
  status), logged with which process;
- a process that does not answer at all (starting, restarting) is left out and
  catches up from the journal (journal.py) before it serves its public ports:
  its ``CatchUp`` (supervisor/messages.py), under the same lock, replays the
  journal to it, so no operation can slip between its replay and the next one;
- statistics are read from every process and summed;
- the model host (when one runs: process N, after the N protocol processes) takes
  every operation too, with two orders: a load reaches it first (a protocol process
  binds to the version the host has loaded: host/client.py), an unload last
  (the protocol processes stop sending it requests, then it drains them). It holds
  only the models no protocol process copies, so its "no such model" to an unload
  or a statistics read is no refusal. A load after the start runs in it (one copy
  for every process, host_on_demand.py ``placement``: decided here, once, and sent
  marked ``hosted``); when none runs yet, such a load starts it first, outside the
  lock (the host catches up under it), so any model can be loaded at any time;
- the repository's changes, when ``repository_poll_secs`` is set, are found by the
  supervisor's one poller (repository_changes.py) and applied here as loads and
  unloads are: in turn, host first, journaled. A reload's protocol processes each
  load the new instances, then wait at a switch barrier (``SwitchReached``) that
  opens once every one has loaded (or its call ended, loaded or not): they all
  start serving the new version together, within the few milliseconds the
  barrier's answers take to reach them.

What a partial failure leaves: the processes that applied the operation keep it
(nothing is undone: undoing a load would unload the version that served before),
the journal records it when any process applied it (a process restarted later
matches the majority), and the client gets the error; sending it again brings
the others along.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferd.errors import InferdError, InvalidRequest, StatusError
from inferd.host.on_demand import HostOnDemand
from inferd.server.protocol_role import MSGPACK
from inferd.serving.operations import (
    LOADS,
    UNLOADS,
    Load,
    LoadOnRequest,
    Operation,
    ReadStatistics,
    RepositoryReload,
    UnregisterMemory,
    decode_value,
    encode,
    error_of,
    refusal_of,
)
from inferd.supervisor.fanout import Answer, deliver, deliver_to_each
from inferd.supervisor.journal import Journal
from inferd.supervisor.merging import NO_PROCESS, Settled, merge_statistics, settle
from inferd.supervisor.messages import (
    CatchUp,
    LoadedAtStart,
    SwitchReached,
    decode_to_coordinator,
)
from inferd.supervisor.paths import PrivatePaths

logger = logging.getLogger(__name__)

# Where the coordinator takes every message on coordinator.sock.
COORDINATOR_PATH = "/coordinator"
# How long a load waits for a model host that has not caught up yet (starting or
# restarting) before it is applied without it (the host then catches up later).
HOST_CATCH_UP_WAIT_SECONDS = 60.0


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
        # Set once the model host has caught up (its start, a restart); cleared when it
        # does not answer. A load waits for it outside the lock: applied while the host
        # starts, the protocol processes would wait on host.sock for a version the host
        # gets only from its catch-up, which waits for the lock that load holds.
        self._host_caught_up = asyncio.Event()

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

    async def apply(self, operation: Operation) -> Answer | None:
        """``operation`` (a server-wide one) in every process, in turn with every
        other operation; the answer the client gets (None: no process answered)."""
        try:
            operation = await self._placed(operation)
        except InferdError as error:
            return Answer(self.host_socket, 503, {}, encode(refusal_of(error, 503)))
        if self.host_runs and isinstance(operation, LOADS):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._host_caught_up.wait(), HOST_CATCH_UP_WAIT_SECONDS)
        async with self._lock:
            # Another load may start it meanwhile: this one's is this.
            host = self.host if self._reaches_host(operation) else None
            answers = await self._fan_out(operation, host)
            if host is not None and not answers[-1].status:  # the host gave no answer
                self._host_caught_up.clear()
            settled = settle(answers)
            self._log_settled(operation, settled, answers)
            if settled.applied:
                value = next(decode_value(answer.body) for answer in answers if answer.ok)
                self.journal.applied(operation, value)
        if isinstance(operation, UnregisterMemory) and settled.ok:
            return _held_anywhere(settled, answers)
        return (_host_refusal(answers) if host else None) or settled.answer

    def _reaches_host(self, operation: Operation) -> bool:
        """Whether ``operation`` goes to the model host: not a load ``_placed`` left
        in every protocol process (the host would leave it out)."""
        placed = self._on_demand is not None and isinstance(operation, LOADS)
        return not placed or bool(getattr(operation, "hosted", False))

    async def _placed(self, operation: Operation) -> Operation:
        """``operation`` as every process applies it: a load that runs in the model host
        (host_on_demand.py ``placement``: one decision, logged once) marked ``hosted``,
        the host started first when none runs (not under the lock: it catches up under it)."""
        load = loaded_model(operation)
        if self._on_demand is None or load is None:
            return operation
        on_request = isinstance(operation, LoadOnRequest)
        where = await asyncio.to_thread(self._on_demand.placement, *load, on_request)
        if where is None:
            return operation
        if not self.host_runs:
            await self._on_demand.start()
            self.host_runs = True
        return msgspec.structs.replace(operation, hosted=True)

    async def _fan_out(self, operation: Operation, host: Path | None) -> list[Answer]:
        """Every process's answer (the host's last, when ``host``), sent in the order
        ``operation`` needs."""
        if host is None:
            return await self._to_protocol_processes(operation)
        if isinstance(operation, LOADS):
            hosted = await deliver(host, operation)
            return [*await self._to_protocol_processes(operation), hosted]
        if isinstance(operation, UNLOADS):
            answers = await deliver_to_each(self.sockets, operation)
            return [*answers, _held_nothing(await deliver(host, operation))]
        return await deliver_to_each([*self.sockets, host], operation)

    async def _to_protocol_processes(self, operation: Operation) -> list[Answer]:
        """``operation`` to every protocol process; a repository reload with a switch
        barrier that each passes once every one has loaded (or its call has ended)."""
        if not isinstance(operation, RepositoryReload):
            return await deliver_to_each(self.sockets, operation)
        number = next(self._switch_ids)
        barrier = self._switches[number] = _Barrier(set(range(len(self.sockets))))
        barriered = msgspec.structs.replace(operation, switch=number)

        async def one(index: int, socket: Path) -> Answer:
            try:
                return await deliver(socket, barriered)
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

    async def statistics(self, operation: ReadStatistics) -> Answer | None:
        """Triton's statistics, summed over the processes (the answer's value)."""
        everyone = self._everyone
        answers = await deliver_to_each(everyone, operation)
        if len(everyone) > len(self.sockets):  # the host holds some models only
            answers[-1] = _held_nothing(answers[-1], encode([]))
        settled = settle(answers)
        if settled.answer is None or not settled.ok:
            self._log_settled(operation, settled, answers)
            return settled.answer
        lists = [decode_value(answer.body) for answer in answers if answer.ok]
        return dataclasses.replace(settled.answer, body=encode(merge_statistics(lists)))

    async def catch_up(self, index: int) -> dict[str, Any]:
        """Replay the journal to process ``index``: how many operations it applied,
        and those it refused (each logged)."""
        socket = self.paths.rest(index)
        failed = []
        async with self._lock:
            operations = self.journal.operations()
            for operation in operations:
                answer = await deliver(socket, operation)
                if not _reached(operation, answer):
                    said = why(answer)
                    logger.warning("%s catching up: %r: %s", self._name(index), operation, said)
                    failed.append(
                        {"operation": repr(operation), "status": answer.status, "error": said}
                    )
            if index == len(self.sockets):
                self._host_caught_up.set()
        return {"applied": len(operations) - len(failed), "failed": failed}

    def _name(self, index: int) -> str:
        return "The model host" if index == len(self.sockets) else f"Protocol process {index}"

    def _log_settled(self, operation: Operation, settled: Settled, answers: list[Answer]) -> None:
        for index in settled.failed:
            status, said = answers[index].status, why(answers[index])
            logger.warning("%s refused %r (%d): %s", self._name(index), operation, status, said)
        for index in settled.unreached:
            logger.warning(
                "%s did not answer %r (%s); it catches up when it starts",
                self._name(index),
                operation,
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


def loaded_model(operation: Operation) -> tuple[str, str | None] | None:
    """The model ``operation`` loads and its configuration override; None if it loads
    none."""
    if not isinstance(operation, LOADS):
        return None
    return operation.name, operation.config if isinstance(operation, Load) else None


def why(answer: Answer) -> str:
    """What a refusal says (its message), or why there was no answer."""
    if not answer.status:
        return answer.error
    try:
        return error_of(answer.body).message
    except (msgspec.DecodeError, msgspec.ValidationError):
        return answer.body.decode("utf-8", "replace")


def _reached(operation: Operation, answer: Answer) -> bool:
    """Whether the process is where ``operation`` leaves it: it applied it, or the
    operation unloads a model it does not hold (it did not load it at start-up)."""
    return answer.ok or (answer.status == 404 and isinstance(operation, UNLOADS))


def _host_refusal(answers: list[Answer]) -> Answer | None:
    """The host's refusal (its answer is the last), which says why better than a
    protocol process's (which found the host's version unavailable); None when the
    host did not refuse."""
    hosted = answers[-1]
    return hosted if hosted.status and not hosted.ok else None


def _held_anywhere(settled: Settled, answers: list[Answer]) -> Answer | None:
    """An unregister's answer: the regions a request holds in any process (each
    process answers those it holds), so that none drops a region another still uses."""
    held = {name for answer in answers if answer.ok for name in decode_value(answer.body) or ()}
    assert settled.answer is not None
    return dataclasses.replace(settled.answer, body=encode(sorted(held)))


def _held_nothing(answer: Answer, body: bytes = b"") -> Answer:
    """The model host's "no such model": it holds only the models no protocol process
    copies, so for the others that is no refusal (an unload, a statistics read)."""
    if answer.status != 404:
        return answer
    return dataclasses.replace(answer, status=200, body=body)


def _response(answer: Answer | None) -> Response:
    """An answer passed on as it is (its status; its value or refusal)."""
    if answer is None:
        refusal = refusal_of(StatusError(NO_PROCESS, 503), 503)
        return Response(encode(refusal), 503, media_type=MSGPACK)
    return Response(answer.body, answer.status, media_type=MSGPACK)


def _value(value: Any) -> Response:
    return Response(encode(value), 200, media_type=MSGPACK)


def build_coordinator_app(
    paths: PrivatePaths, count: int, host: bool = False, on_demand: HostOnDemand | None = None
) -> Starlette:
    """The coordinator of protocol processes 0..count-1 (their sockets in ``paths``)
    and of the model host (from the start with ``host``, else when ``on_demand``
    starts it), as an ASGI app; ``app.state.coordinator`` holds its journal."""
    return coordinator_app(Coordinator(paths, count, host, on_demand))


def coordinator_app(coordinator: Coordinator) -> Starlette:
    """``coordinator`` served as an ASGI app (``app.state.coordinator``): one path,
    ``COORDINATOR_PATH``, whose POST body is a message of supervisor/messages.py."""

    async def take(request: Request) -> Response:
        try:
            message = decode_to_coordinator(await request.body())
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            refused = InvalidRequest(f"Not a message to the coordinator: {error}")
            return Response(encode(refusal_of(refused, 400)), 400, media_type=MSGPACK)
        match message:
            case ReadStatistics():
                return _response(await coordinator.statistics(message))
            case CatchUp(index):
                return _value(await coordinator.catch_up(index))
            case LoadedAtStart(index):
                await coordinator.loaded(index)
                return _value(None)
            case SwitchReached(number, index):
                await coordinator.switch(number, index)
                return _value(None)
            case _:
                return _response(await coordinator.apply(message))

    app = Starlette(routes=[Route(COORDINATOR_PATH, take, methods=["POST"])])
    app.state.coordinator = coordinator
    return app
