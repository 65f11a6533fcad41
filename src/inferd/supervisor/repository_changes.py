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
process applies it on its private socket (server/protocol_role.py
``REPOSITORY_CHANGE``) as a lone server's poller would: a folder that cannot be
read keeps the loaded version serving, and its index says why.

What this orders, and what it cannot, is in docs/design.md ("Coordinator", "The
repository polled once").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import quote

from inferd.server.protocol_role import REPOSITORY_CHANGE
from inferd.serving.registry import Switch
from inferd.serving.repository import ModelRepository
from inferd.serving.repository_poll import ModelChanges, RepositoryPoller
from inferd.settings import ServerSettings
from inferd.supervisor.coordinator import Coordinator
from inferd.supervisor.journal import RELOAD, REMOVE, Call

logger = logging.getLogger(__name__)


class ServerWideChanges(ModelChanges):
    """The poller's changes, applied in every process through ``coordinator``."""

    def __init__(self, coordinator: Coordinator) -> None:
        self._coordinator = coordinator

    async def reload(self, name: str, switch: Switch | None = None) -> None:
        """Sent to every process; each switches at the coordinator's barrier."""
        await self._apply(name, RELOAD)

    async def remove(self, name: str) -> None:
        await self._apply(name, REMOVE)

    async def _apply(self, name: str, action: str) -> None:
        answer = await self._coordinator.apply(
            Call("POST", f"{REPOSITORY_CHANGE}/{quote(name, safe='')}/{action}")
        )
        if answer is not None and answer.ok:
            logger.info("Model %r: the repository's change (%s) is applied", name, action)
        else:  # the coordinator logged which process and why
            why = answer.body.decode("utf-8", "replace") if answer is not None else "no process"
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
