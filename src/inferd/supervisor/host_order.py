"""The model host's place in the coordinator's operations.

The model host (when one runs: process N, after the N protocol processes) takes
every server-wide operation too, with two orders: a load reaches it first (a
protocol process binds to the version the host has loaded: workers/host_client.py),
an unload last (the protocol processes stop sending it requests, then it drains
them); any other operation reaches every process at once.

A load after the start runs in it (one copy for every process: host/on_demand.py
``placement``, decided here, once, and sent marked ``hosted``); when none runs
yet, such a load starts it first, outside the coordinator's lock (the host catches
up under it), so any model can be loaded at any time. A load waits, outside the
lock too, for a host that has not caught up yet (starting, restarting): applied
meanwhile, the protocol processes would wait on host.sock for a version the host
gets only from its catch-up, which waits for the lock that load holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import msgspec

from inferd.host.on_demand import HostOnDemand
from inferd.serving.operations import LOADS, UNLOADS, Load, LoadOnRequest, Operation
from inferd.supervisor.outcomes import NoAnswer, Outcome, Process, ask
from inferd.supervisor.paths import PrivatePaths

# How long a load waits for a model host that has not caught up yet (starting or
# restarting) before it is applied without it (the host then catches up later).
HOST_CATCH_UP_WAIT_SECONDS = 60.0


class HostOrder:
    """Whether the model host runs, where a load goes, and in which order an
    operation reaches the host and the protocol processes."""

    def __init__(
        self, paths: PrivatePaths, process: Process, runs: bool, on_demand: HostOnDemand | None
    ) -> None:
        """The host is ``process``; it runs from the start when ``runs``, else
        ``on_demand`` starts it for a load that needs it (None: never)."""
        self.paths = paths
        self.process = process
        self.runs = runs
        self._on_demand = on_demand
        # Set once the host has caught up (its start, a restart); cleared when it
        # does not answer.
        self.caught_up = asyncio.Event()

    async def placed(self, operation: Operation) -> Operation:
        """``operation`` as every process applies it: a load that runs in the model host
        (host/on_demand.py ``placement``: one decision, logged once) marked ``hosted``,
        the host started first when none runs. Raises the start's InferdError."""
        load = loaded_model(operation)
        if self._on_demand is None or load is None:
            return operation
        on_request = isinstance(operation, LoadOnRequest)
        where = await asyncio.to_thread(self._on_demand.placement, *load, on_request)
        if where is None:
            return operation
        if not self.runs:
            await self._on_demand.start()
            self.runs = True
        return msgspec.structs.replace(operation, hosted=True)

    async def ready_for(self, operation: Operation) -> None:
        """Return once the host has caught up, for a load (at most
        ``HOST_CATCH_UP_WAIT_SECONDS``); at once for anything else."""
        if self.runs and isinstance(operation, LOADS):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.caught_up.wait(), HOST_CATCH_UP_WAIT_SECONDS)

    def reaches(self, operation: Operation) -> bool:
        """Whether ``operation`` goes to the host: while it runs, anything but a load
        ``placed`` left in every protocol process (the host would leave it out)."""
        placed = self._on_demand is not None and isinstance(operation, LOADS)
        return self.runs and (not placed or bool(getattr(operation, "hosted", False)))

    async def in_order(
        self, operation: Operation, protocol_processes: Callable[[], Awaitable[list[Outcome]]]
    ) -> list[Outcome]:
        """Every process's outcome, the host's among them, each reached in the order
        ``operation`` needs (``protocol_processes``: send it to all of those)."""
        if isinstance(operation, LOADS):
            hosted = await self._ask(operation)
            return [*await protocol_processes(), hosted]
        if isinstance(operation, UNLOADS):
            outcomes = await protocol_processes()
            return [*outcomes, await self._ask(operation)]
        outcomes, hosted = await asyncio.gather(protocol_processes(), self._ask(operation))
        return [*outcomes, hosted]

    async def _ask(self, operation: Operation) -> Outcome:
        outcome = await ask(self.paths, self.process, operation)
        if isinstance(outcome, NoAnswer):  # it is restarting: it catches up again
            self.caught_up.clear()
        return outcome


def loaded_model(operation: Operation) -> tuple[str, str | None] | None:
    """The model ``operation`` loads and its configuration override; None if it loads
    none."""
    if not isinstance(operation, LOADS):
        return None
    return operation.name, operation.config if isinstance(operation, Load) else None
