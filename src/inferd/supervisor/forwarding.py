"""A protocol process's side of the coordinator (coordinator.py).

- :class:`ForwardingServerWide`: what the edges of a protocol process are given
  as their :class:`~inferd.serving.server_wide.ServerWide`: each operation's typed
  message (serving/operations.py) goes to the coordinator, and its answer comes
  back as the local operation's would: its value, or the error the refusing
  process raised, rebuilt as the same class (so REST answers the same status and
  gRPC the same code).
- What the process does with the operations the coordinator sends every process
  is ``server/protocol_role.py``'s ``OperationsHere``, on its ``operations-<i>.sock``.
- :func:`catch_up`: a process that starts (or restarts) has the coordinator replay
  its journal to it. Call it once ``rest-<i>.sock`` serves and the start-up models
  are loaded (the journal may unload one of them), before serving the public ports.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec

from inferd.errors import ErrorCode, InferdError
from inferd.serving.operations import Operation
from inferd.serving.server_wide import ServerWide
from inferd.supervisor.messages import CatchUp, LoadedAtStart, SwitchReached
from inferd.supervisor.paths import ProcessRole
from inferd.workers.private_calls import CallUnanswered, call

logger = logging.getLogger(__name__)


class CoordinatorUnreachable(InferdError, code=ErrorCode.UNAVAILABLE):
    """The supervisor's coordinator did not answer (the server is stopping)."""


class ForwardingServerWide(ServerWide):
    """Server-wide operations sent to the coordinator at ``coordinator`` (its socket)."""

    def __init__(self, coordinator: Path) -> None:
        self.coordinator = coordinator

    async def apply(self, operation: Operation) -> Any:
        return await call_coordinator(self.coordinator, operation)


async def call_coordinator(coordinator: Path, message: msgspec.Struct) -> Any:
    """The value of the coordinator's answer to ``message``; the error it refused it
    with (the class the refusing process raised), CoordinatorUnreachable if none came."""
    try:
        return await call(coordinator, message)
    except CallUnanswered as error:
        raise CoordinatorUnreachable(
            f"{message!r} could not reach the coordinator of the protocol processes: {error}"
        ) from None


async def catch_up(role: ProcessRole) -> dict[str, Any]:
    """Have the coordinator replay its journal to this process (``role``): how many
    operations it applied and the ones it refused (the coordinator logs them);
    CoordinatorUnreachable if it does not answer."""
    outcome: dict[str, Any] = await call_coordinator(role.paths.coordinator, CatchUp(role.index))
    return outcome


async def wait_for_every_process(role: ProcessRole) -> None:
    """Tell the coordinator this process has loaded its start-up models, and return
    once every protocol process has (CoordinatorUnreachable if it does not answer)."""
    await call_coordinator(role.paths.coordinator, LoadedAtStart(role.index))


async def switch_together(role: ProcessRole, number: int) -> None:
    """Return once every protocol process has loaded what the repository reload of
    switch ``number`` brings (the coordinator's barrier), so they serve it together.
    A coordinator that cannot say so (the server is stopping) does not hold the new
    version back: it serves now."""
    try:
        await call_coordinator(role.paths.coordinator, SwitchReached(number, role.index))
    except InferdError as error:
        logger.warning("Serving a repository change without the others: %s", error.message)
