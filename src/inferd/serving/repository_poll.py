"""The repository reloads itself: Triton's POLL model control for inferd's folders.

With ``repository_poll_secs`` above 0 the server looks at ``model_repository_root``
that often (stat calls in a thread, see :mod:`inferd.serving.repository_watch`) and,
once a model folder has stopped changing:

- a changed artifact or ``model-settings.json`` reloads the model. The registry
  loads the new instance beside the old one, which serves until the new one is
  READY; requests in flight on the old one finish there.
- a new folder loads its model; a removed folder's model is taken out of service
  at once (new requests: 404) and unloaded once its requests in flight have ended.
- a change that does not load (a broken ``model-settings.json``, a ``load()`` that
  fails) leaves the old instance serving; the log and the repository index's
  ``reason`` say why.

Only changes are acted on: a model unloaded through the repository API stays
unloaded until its files change, and one loaded with a configuration override
keeps it until then. Each model name loads in a task of its own, so a slow load
does not hold up the polls or the other models.

What the poller finds it hands to a :class:`ModelChanges`: a lone server's is
:class:`LocalChanges`, which applies a change to its own registry. With several
protocol processes the supervisor runs the one poller, and its changes go through
the coordinator to every process (supervisor/repository_changes.py), each of
which applies it with its own :class:`LocalChanges`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Protocol

from inferd.errors import ConfigurationError, InferdError, ModelNotFound
from inferd.observability.logs import SERVER_EVENT
from inferd.serving.registry import Registry, Switch
from inferd.serving.repository import ModelRepository
from inferd.serving.repository_watch import (
    Changes,
    ChangeTracker,
    FolderPrint,
    fingerprint_repository,
    names_to_act_on,
)
from inferd.types import ModelState

logger = logging.getLogger(__name__)


class ModelChanges(Protocol):
    """Where the poller's changes are applied."""

    async def reload(self, name: str, switch: Switch | None = None) -> None:
        """Serve what the repository's folders hold for ``name`` now (with ``switch``:
        once it returns, see Registry.load)."""
        ...

    async def remove(self, name: str) -> None:
        """No folder holds ``name`` any more: stop serving it."""
        ...


class LocalChanges(ModelChanges):
    """Changes applied to one registry: a lone server's, or one process's share."""

    def __init__(
        self, repository: ModelRepository, registry: Registry, only_loaded: bool = False
    ) -> None:
        """``only_loaded`` (load_on_request): a new folder is known, not loaded; a
        changed one reloads only if its model is loaded (its first request loads it)."""
        self._only_loaded = only_loaded
        self._repository = repository
        self._registry = registry

    async def remove(self, name: str) -> None:
        if name in self._registry.names():
            await self._registry.remove(name)
            logger.info("Model %r is no longer in the repository: unloaded", name)

    async def reload(self, name: str, switch: Switch | None = None) -> None:
        if self._only_loaded and name not in self._registry.names():
            return  # its first request loads it
        try:
            found = await asyncio.to_thread(self._repository.find, name)
        except (ConfigurationError, ModelNotFound) as error:
            reason = error.message if isinstance(error, InferdError) else str(error)
            self._registry.reload_failed(name, reason)
            keeps = "; the loaded instance keeps serving" if _serves(self._registry, name) else ""
            logger.error("Model %r changed on disk but cannot be loaded: %s%s", name, reason, keeps)
            return
        if not found:  # its folders went since this poll looked: the next poll removes it
            return
        try:
            await self._registry.load(name, found, switch)
        except InferdError:
            return  # the registry logged why and kept the old instance serving
        if name in self._registry.names():  # the model host leaves out what it does not run
            logger.info("Model %r loaded from the repository", name, extra=SERVER_EVENT)


class RepositoryPoller:
    """Watches the repository's folders and brings what is served in line with them."""

    def __init__(self, repository: ModelRepository, changes: ModelChanges, interval: float) -> None:
        self.interval = interval
        self._repository = repository
        self._changes = changes
        self._tracker = ChangeTracker({})
        # Model folder -> the name it served under when last acted on.
        self._names: dict[str, str] = {}
        # Names being loaded or removed now, and the task doing it.
        self._busy: dict[str, asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._root_missing = False

    def watch_from_now(self) -> None:
        """Take the repository as it is now as what is served (call it before the
        start-up load: a change made while that load runs is seen by the first polls)."""
        snapshot = fingerprint_repository(self._repository.root) or {}
        self._tracker = ChangeTracker(snapshot)
        self._names = self._names_now(set(snapshot)) or {}

    def start(self) -> None:
        """Poll every ``interval`` seconds from now on, on the running event loop."""
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._poll_forever(), name="repository poll")
            logger.info(
                "Polling the model repository %s every %gs for changes",
                self._repository.root,
                self.interval,
            )

    async def stop(self) -> None:
        """Stop polling, and stop the loads it started (the server is shutting down)."""
        tasks = [task for task in (self._loop_task, *self._busy.values()) if task is not None]
        self._loop_task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def settled(self) -> None:
        """Wait until the loads and removals started so far have ended (tests)."""
        while self._busy:
            await asyncio.gather(*self._busy.values(), return_exceptions=True)

    async def poll(self) -> None:
        """Look at the repository once, and start loading what has settled."""
        snapshot = await asyncio.to_thread(fingerprint_repository, self._repository.root)
        if snapshot is None:
            self._say_root_missing()
            return
        self._root_missing = False
        changes = self._tracker.observe(snapshot)
        if not changes.settled:
            return
        names_now = await asyncio.to_thread(self._names_now, set(snapshot))
        if names_now is None:  # the root went away since the walk: the next poll says so
            return
        present = set(names_now.values())
        plan = names_to_act_on(changes, self._names, names_now, busy=self._busy)
        for name, folders in plan.items():
            prints = {folder: changes.settled[folder] for folder in folders}
            if not name:  # came and went between two polls: nothing was served from it
                self._settle(prints, names_now)
                continue
            action = "loading" if name in present else "unloading"
            logger.info(
                "Model repository: %s: %s model %r", _described(folders, changes), action, name
            )
            self._busy[name] = asyncio.create_task(
                self._apply(name, name in present, prints, names_now),
                name=f"repository change of {name}",
            )

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.poll()
            except Exception:  # a poll that failed must not end polling
                logger.exception("Polling the model repository %s failed", self._repository.root)

    async def _apply(
        self,
        name: str,
        present: bool,
        prints: dict[str, FolderPrint | None],
        names: dict[str, str],
    ) -> None:
        try:
            if present:
                await self._changes.reload(name)
            else:
                await self._changes.remove(name)
        except Exception:
            logger.exception("Applying the repository's change to model %r failed", name)
        finally:
            self._settle(prints, names)
            self._busy.pop(name, None)

    def _settle(self, prints: dict[str, FolderPrint | None], names: dict[str, str]) -> None:
        self._tracker.settle(prints)
        for folder, found in prints.items():
            name = names.get(folder)
            if found is None or name is None:
                self._names.pop(folder, None)
            else:
                self._names[folder] = name

    def _names_now(self, folders: set[str]) -> dict[str, str] | None:
        """The model name each folder's settings file gives now (reads those small
        files: done only when something changed); None if the root went away. A file
        too broken to name its model still belongs to the model its folder served."""
        root = self._repository.root
        try:
            scan = self._repository.scan()
        except ConfigurationError:
            return None
        named = {os.path.relpath(folder, root): name for folder, name in scan.names.items()}
        return {
            folder: name
            for folder in folders
            if (name := named.get(folder) or self._names.get(folder)) is not None
        }

    def _say_root_missing(self) -> None:
        if not self._root_missing:
            self._root_missing = True
            logger.warning(
                "Model repository %s is not a folder now; the models loaded keep serving "
                "and polling goes on",
                self._repository.root,
            )


def _serves(registry: Registry, name: str) -> bool:
    """Whether some version of ``name`` is READY (serving) now."""
    return any(v.name == name and v.state is ModelState.READY for v in registry.versions())


def _described(folders: set[str], changes: Changes) -> str:
    """The folders of one model that changed, as the log says it."""
    removed = sorted(folders & changes.removed)
    present = sorted(folders - changes.removed)
    parts = [f"{present} changed" if present else "", f"{removed} removed" if removed else ""]
    return " and ".join(part for part in parts if part)
