"""The coordinator: server-wide operations applied in every protocol process.

The supervisor serves it on its private ``coordinator.sock`` (coordinator_calls.py).
A protocol process that takes a server-wide operation (supervisor/forwarding.py)
sends it here as its typed message (serving/operations.py); the coordinator sends
the same message to every protocol process's private ``operations-<i>.sock`` (where
each applies it to itself), each a call in ipc frames (workers/private_calls.py),
reads each reply once into a typed outcome of the process it came from
(outcomes.py: applied, refused, not held, no answer), settles them into what the
client gets (merging.py) and answers as the processes did:

- one at a time: a lock orders the operations, so every process applies them in
  the same order (two loads of one model cannot end differently in two processes);
- all that answered applied it: the first one's value; one refused it: that
  refusal as its process gave it (the error, rebuilt as its class), logged with
  which process;
- a process that does not answer at all (starting, restarting) is left out and
  catches up from the journal (journal.py) before it serves its public ports:
  its ``CatchUp`` (supervisor/messages.py), under the same lock, replays the
  journal to it, so no operation can slip between its replay and the next one;
- statistics are read from every process and summed;
- the model host (when one runs: process N, after the N protocol processes) takes
  every operation too, a load first and an unload last, and the loads after the
  start (host_order.py); its "no such model" to an unload or a statistics read is
  no refusal (it holds only the models no protocol process copies), its refusal is
  what the client gets;
- the repository's changes, when ``repository_poll_secs`` is set, are found by the
  supervisor's one poller (repository_changes.py) and applied here as loads and
  unloads are: in turn, host first, journaled. A reload's protocol processes each
  load the new instances, then wait at a switch barrier (``SwitchReached``) that
  opens once every one has loaded (or its call ended, loaded or not): they all
  start serving the new version together, within the few milliseconds the
  barrier's answers take to reach them.

No HTTP status travels between them: a reply is a value or an error of its class
(outcomes.py reads each process's; coordinator_calls.py answers the process that
forwarded the operation), and the edge that took the client's call maps it as it
maps a local one.

What a partial failure leaves: the processes that applied the operation keep it
(nothing is undone: undoing a load would unload the version that served before),
the journal records it when any process applied it (a process restarted later
matches the majority), and the client gets the error; sending it again brings
the others along.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from inferd.errors import InferdError
from inferd.host.on_demand import HostOnDemand
from inferd.serving.operations import (
    UNLOADS,
    Operation,
    ReadStatistics,
    RepositoryReload,
    UnregisterMemory,
)
from inferd.supervisor.host_order import HostOrder
from inferd.supervisor.journal import Journal
from inferd.supervisor.merging import (
    Settled,
    held_anywhere,
    merge_statistics,
    settle,
)
from inferd.supervisor.outcomes import (
    Applied,
    NoAnswer,
    NotHeld,
    Outcome,
    Process,
    Refused,
    ask,
    said,
)
from inferd.supervisor.paths import PrivatePaths

logger = logging.getLogger(__name__)

# What the client of an operation gets: its value, a refusal, or None (no process
# answered).
Answered = Applied | Refused | NotHeld | None


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
        self.processes = [Process.protocol(index) for index in range(count)]
        self.host = HostOrder(paths, Process.host(count), host, on_demand)
        self.journal = Journal()
        self._lock = asyncio.Lock()
        self._loaded: set[int] = set()
        self._all_loaded = asyncio.Event()
        # Awaited once every process has loaded, before any is let through to ready
        # (the supervisor gives up the REST port it answered meanwhile: loading.py).
        self.before_ready: Callable[[], Awaitable[None]] | None = None
        self._switches: dict[int, _Barrier] = {}
        self._switch_ids = itertools.count(1)

    def process(self, index: int) -> Process:
        """Process ``index``: a protocol process, or the model host after them."""
        return self.host.process if index == len(self.processes) else Process.protocol(index)

    async def loaded(self, index: int) -> None:
        """Process ``index`` has loaded its start-up models; returns once every
        process has. At the server's start each waits here before it says it is
        ready: one process ready while another still loads would have a client
        whose probe it answered sent to the other, and refused."""
        self._loaded.add(index)
        if len(self._loaded) == len(self.processes) and not self._all_loaded.is_set():
            if self.before_ready is not None:
                before, self.before_ready = self.before_ready, None
                await before()
            self._all_loaded.set()
        await self._all_loaded.wait()

    async def apply(self, operation: Operation) -> Answered:
        """``operation`` (a server-wide one) in every process, in turn with every
        other operation; what the client gets."""
        try:
            operation = await self.host.placed(operation)
        except InferdError as error:
            return Refused(self.host.process, error)
        await self.host.ready_for(operation)
        async with self._lock:
            # Another load may start the host meanwhile: whether this one reaches it is this.
            if self.host.reaches(operation):
                others = functools.partial(self._to_protocol_processes, operation)
                outcomes = await self.host.in_order(operation, others)
            else:
                outcomes = await self._to_protocol_processes(operation)
            settled = settle(outcomes)
            self._log_settled(operation, settled)
            if settled.held:
                self.journal.applied(operation, next(iter(settled.values), None))
        if isinstance(operation, UnregisterMemory) and isinstance(settled.answer, Applied):
            return Applied(settled.answer.process, held_anywhere(settled))
        return settled.answer

    async def _to_protocol_processes(self, operation: Operation) -> list[Outcome]:
        """``operation`` to every protocol process; a repository reload with a switch
        barrier that each passes once every one has loaded (or its call has ended)."""
        if not isinstance(operation, RepositoryReload):
            return await self._ask_each(self.processes, operation)
        number = next(self._switch_ids)
        barrier = self._switches[number] = _Barrier({p.index for p in self.processes})
        barriered = msgspec.structs.replace(operation, switch=number)

        async def one(process: Process) -> Outcome:
            try:
                return await ask(self.paths, process, barriered)
            finally:
                barrier.passed(process.index)  # failed, refused, or switched already

        try:
            return list(await asyncio.gather(*(one(process) for process in self.processes)))
        finally:
            del self._switches[number]

    async def _ask_each(self, processes: list[Process], operation: Operation) -> list[Outcome]:
        asked = (ask(self.paths, process, operation) for process in processes)
        return list(await asyncio.gather(*asked))

    async def switch(self, number: int, index: int) -> None:
        """Process ``index`` has loaded what reload ``number`` brings: return once every
        process has (at once if that reload is over: nothing waits for it any more)."""
        barrier = self._switches.get(number)
        if barrier is not None:
            barrier.passed(index)
            await barrier.open.wait()

    async def statistics(self, operation: ReadStatistics) -> Answered:
        """Triton's statistics, summed over the processes (the answer's value); the
        host's "no such model" adds nothing (it holds some models only)."""
        everyone = [*self.processes, self.host.process] if self.host.runs else self.processes
        settled = settle(await self._ask_each(everyone, operation))
        if not isinstance(settled.answer, Applied):
            self._log_settled(operation, settled)
            return settled.answer
        return Applied(settled.answer.process, merge_statistics(settled.values))

    async def catch_up(self, index: int) -> dict[str, Any]:
        """Replay the journal to process ``index``: how many operations it applied,
        and those it refused (each logged)."""
        process = self.process(index)
        failed = []
        async with self._lock:
            operations = self.journal.operations()
            for operation in operations:
                outcome = await ask(self.paths, process, operation)
                failure = _failure(operation, outcome)
                if failure is not None:
                    logger.warning("%s catching up: %r: %s", process, operation, said(outcome))
                    failed.append(failure)
            if process.is_host:
                self.host.caught_up.set()
        return {"applied": len(operations) - len(failed), "failed": failed}

    def _log_settled(self, operation: Operation, settled: Settled) -> None:
        for refused in settled.refused:
            error = refused.error
            logger.warning(
                "%s refused %r (%s): %s", refused.process, operation, type(error).__name__, error
            )
        for unanswered in settled.unanswered:
            logger.warning(
                "%s did not answer %r (%s); it catches up when it starts",
                unanswered.process,
                operation,
                unanswered.error,
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


def _failure(operation: Operation, outcome: Outcome) -> dict[str, Any] | None:
    """A replayed operation's failure as the catch-up lists it (the class of its
    refusal's error, "NoAnswer" for none); None where the process is where
    ``operation`` leaves it: it applied it, or it unloads a model the process does
    not hold (it did not load it at start-up)."""
    match outcome:
        case Applied():
            return None
        case NotHeld() if isinstance(operation, UNLOADS):
            return None
        case Refused(_, error) | NotHeld(_, error):
            refused = type(error).__name__
        case NoAnswer():
            refused = "NoAnswer"
    return {"operation": repr(operation), "refused": refused, "error": said(outcome)}
