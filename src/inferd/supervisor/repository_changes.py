"""The repository polled once for every process: ``repository_poll_secs`` with a supervisor.

A lone server polls its repository itself (serving/repository_poll.py). With
several protocol processes, each polling on its own would reload a changed
folder when it happened to look: for up to one interval two connections would
get two versions of one model. So the protocol processes (and the model host)
do not poll; the supervisor runs the one :class:`RepositoryPoller`, and each
change it finds (a model's folders changed or appeared: reload; they went:
remove) is applied through the coordinator as a repository API load or unload
is: in turn with every other server-wide operation, the model host first for a
reload (started then if the model needs it and none runs) and last for a
removal, and journaled, so a process that starts later catches up on it. Each
process applies it (``RepositoryReload``, ``RepositoryRemove``: serving/operations.py,
applied by server/protocol_role.py ``OperationsHere``) as a lone server's poller
would: a folder that cannot be read keeps the loaded version serving, and its
index says why.

What this orders, and what it cannot, is in docs/design.md ("Coordinator", "The
repository polled once").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from inferd.serving.operations import Operation, RepositoryReload, RepositoryRemove
from inferd.serving.registry import Switch
from inferd.serving.repository import ModelRepository
from inferd.serving.repository_poll import ModelChanges, RepositoryPoller
from inferd.settings import ServerSettings
from inferd.supervisor.coordinator import Coordinator
from inferd.supervisor.outcomes import Applied, said

logger = logging.getLogger(__name__)


class ServerWideChanges(ModelChanges):
    """The poller's changes, applied in every process through ``coordinator``."""

    def __init__(self, coordinator: Coordinator) -> None:
        self._coordinator = coordinator

    async def reload(self, name: str, switch: Switch | None = None) -> None:
        """Sent to every process; each switches at the coordinator's barrier."""
        await self._apply(RepositoryReload(name), "reload")

    async def remove(self, name: str) -> None:
        await self._apply(RepositoryRemove(name), "remove")

    async def _apply(self, change: Operation, action: str) -> None:
        name = getattr(change, "name", "")
        answered = await self._coordinator.apply(change)
        if isinstance(answered, Applied):
            logger.info("Model %r: the repository's change (%s) is applied", name, action)
        else:  # the coordinator logged which process and why
            why = said(answered) if answered is not None else "no process"
            logger.warning("Model %r: the repository's change (%s) failed: %s", name, action, why)


def repository_poll(
    settings: ServerSettings, coordinator: Coordinator, stopping: asyncio.Event
) -> Callable[[], Coroutine[Any, Any, None]] | None:
    """The supervisor's poll of the repository, to run until ``stopping`` is set;
    None when ``repository_poll_secs`` is 0. What is on disk now is what the
    processes are about to load at their start: changes are looked for from now on."""
    if settings.repository_poll_secs <= 0:
        return None
    repository = ModelRepository(
        Path(settings.model_repository_root), loaded_later=not settings.load_models_at_startup
    )
    poller = RepositoryPoller(
        repository, ServerWideChanges(coordinator), settings.repository_poll_secs
    )
    poller.watch_from_now()

    async def poll_until_stopping() -> None:
        poller.start()
        try:
            await stopping.wait()
        finally:
            await poller.stop()  # no model loads while the processes drain

    return poll_until_stopping
