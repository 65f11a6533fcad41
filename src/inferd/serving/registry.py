"""The model registry: which model versions exist and what state each is in.

Each version (a :class:`~inferd.serving.model_version.ModelVersion`) is loaded,
answered and unloaded by a backend (serving/backends.py): this process's own (its
pool, through dispatch), unless a :class:`BackendChoice` names another for it
(model_version.py ``Backends``).

Loading a model name replaces the set of versions served under it: new versions
are loaded (and an existing version reloaded) before the old instances are
unloaded, so a model keeps answering while it is reloaded. A load given a
``switch`` (a repository change applied in every protocol process) loads every
new instance first, awaits ``switch`` (the other processes have loaded theirs),
and only then serves them, all at once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from inferd.errors import (
    ConfigurationError,
    InferdError,
    InvalidRequest,
    ModelError,
    ModelNotFound,
    ModelNotReady,
)
from inferd.observability.logs import SERVER_EVENT
from inferd.observability.stats import ModelStatsTable
from inferd.serving.backends import BackendChoice
from inferd.serving.model_version import Backends, ModelVersion
from inferd.serving.response_cache import ResponseCache
from inferd.settings import ModelSettings
from inferd.triton.classification import Classifier
from inferd.types import ModelState, RepositoryEntry
from inferd.workers.base import Control, Pool

logger = logging.getLogger(__name__)

# Awaited by a load between loading its new instances and serving them.
Switch = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class _Model:
    versions: dict[str | None, ModelVersion] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Registry:
    def __init__(
        self,
        pool: Pool,
        stats: ModelStatsTable,
        max_queue_size: int = 0,
        cache: ResponseCache | None = None,
        choice: BackendChoice | None = None,
    ) -> None:
        """``pool``, ``max_queue_size`` (the server's bound, for versions that set
        none; 0: none) and ``cache``: this process's own backend's. ``choice``: which
        versions another backend serves, when this server is one of several processes
        (serving/backends.py); None: this process's serves every model."""
        self._backends = Backends(pool, stats, max_queue_size, cache, choice, self.instance_failed)
        self._choice = choice
        self.stats = stats
        self._models: dict[str, _Model] = {}
        self._instance_ids = itertools.count(1)

    def control(self, message: Control) -> None:
        """Deliver a feature's control message where the instances run (worker
        processes too; see workers.base.Control), e.g. the logging extension's level."""
        self._backends.control(message)

    def names(self) -> list[str]:
        return list(self._models)

    def versions(self) -> list[ModelVersion]:
        return [version for model in self._models.values() for version in model.versions.values()]

    def versions_of(self, name: str) -> Iterable[ModelVersion]:
        """The versions of ``name`` in any state (none if unknown)."""
        model = self._models.get(name)
        return model.versions.values() if model is not None else ()

    def all_ready(self) -> bool:
        return all(version.state is ModelState.READY for version in self.versions())

    def find(self, name: str, version: str | None = None) -> ModelVersion:
        """The version asked for (or the default one); ModelNotFound if unknown."""
        model = self._models.get(name)
        if model is None or not model.versions:
            raise ModelNotFound(name, version)
        if version:
            try:
                return model.versions[version]
            except KeyError:
                raise ModelNotFound(name, version) from None
        return _default_version(model.versions)

    def ready_versions(self, name: str) -> list[str]:
        """The versions of ``name`` that are READY, in natural order ("2" before "10")."""
        model = self._models.get(name)
        found = model.versions.values() if model else ()
        ready = [v.version for v in found if v.version and v.state is ModelState.READY]
        return sorted(ready, key=_natural_key)

    def instances(self, version: ModelVersion) -> int:
        """How many workers hold the version now (1 in process); 0 when none does."""
        if version.backend is None or version.calls is None:
            return 0
        return version.backend.instances(version.instance_id, version.settings)

    def get_ready(self, name: str, version: str | None = None) -> ModelVersion:
        """The version to send a request to; raises unless it is READY."""
        found = self.find(name, version)
        if found.state is ModelState.READY:
            return found
        label = _capitalized(found.settings.label)
        if found.state is ModelState.UNAVAILABLE:
            raise ModelNotReady(f"{label} is unavailable: {found.reason}")
        raise ModelNotReady(f"{label} is not ready: it is {found.state.value.lower()}")

    def instance_failed(self, instance_id: int, reason: str) -> None:
        """The pool (or another backend) gave up an instance: its load keeps crashing."""
        for version in self.versions():
            if version.calls is not None and version.instance_id == instance_id:
                version.state = ModelState.UNAVAILABLE
                version.reason = reason
                logger.error("%s is unavailable: %s", _capitalized(version.settings.label), reason)

    def index(self) -> list[RepositoryEntry]:
        return [
            RepositoryEntry(version.name, version.version, version.state, version.reason)
            for version in self.versions()
        ]

    async def load(
        self, name: str, settings: list[ModelSettings], switch: Switch | None = None
    ) -> None:
        """Serve exactly ``settings`` (the versions found on disk) under ``name``.

        Raises the first load error after every version has been tried; versions
        that loaded keep serving and a failed reload keeps the old instance. With
        ``switch``, the new instances serve only once it returns (it is awaited
        whatever loaded, so a process that failed does not hold the others).
        """
        if self._choice is not None:
            settings = self._choice.served(settings)
            if not settings and name not in self._models:
                if switch is not None:
                    await switch()
                return  # no backend here serves any of it
        while True:
            model = self._models.setdefault(name, _Model())
            async with model.lock:
                if self._models.get(name) is not model:
                    continue  # removed while this waited: load into the entry served now
                errors = await self._load_versions(model, settings, switch)
                wanted = {version.version for version in settings}
                for stale in [key for key in model.versions if key not in wanted]:
                    await self._unload_version(model, stale)
                if not model.versions:  # none of it runs here any more
                    del self._models[name]
                break
        if errors:
            raise errors[0]

    async def _load_versions(
        self, model: _Model, settings: list[ModelSettings], switch: Switch | None
    ) -> list[InferdError]:
        """Each version loaded, and served as soon as it is (no ``switch``) or all of
        them once ``switch`` returns."""
        errors: list[InferdError] = []
        loaded: list[tuple[ModelVersion, ModelVersion | None]] = []
        for version_settings in settings:
            try:
                new, old = await self._load_version(model, version_settings)
            except InferdError as error:
                errors.append(error)
                continue
            if switch is None:
                await self._serve([(new, old)], model)
            else:
                loaded.append((new, old))
        if switch is not None:
            await switch()
            await self._serve(loaded, model)
        return errors

    async def _serve(
        self, loaded: list[tuple[ModelVersion, ModelVersion | None]], model: _Model
    ) -> None:
        """Loaded versions serve from now on, all in one step; then the instances
        they replace are retired."""
        for new, _ in loaded:
            new.state = ModelState.READY
            model.versions[new.settings.version] = new
            seconds = new.load_seconds
            logger.info("Loaded %s in %.2fs", new.settings.label, seconds, extra=SERVER_EVENT)
        for _, old in loaded:
            if old is not None and old.calls is not None:
                await old.retire()

    async def _load_version(
        self, model: _Model, settings: ModelSettings
    ) -> tuple[ModelVersion, ModelVersion | None]:
        """The new instance of a version, loaded (not serving yet), and the one it
        replaces."""
        old = model.versions.get(settings.version)
        new = ModelVersion(settings)
        if old is None or old.state is not ModelState.READY:
            model.versions[settings.version] = new
        try:  # its label files are read now: a load fails without them, as in Triton
            new.classifier = Classifier(settings)
        except ConfigurationError as error:
            self._mark_failed(model, new, old, error)
            raise _as_inferd_error(error) from error
        backend = self._backends.of(settings)
        where = f" ({backend.where})" if backend.where else ""
        logger.info("Loading %s%s", new.settings.label, where, extra=SERVER_EVENT)
        try:
            await new.load(backend, next(self._instance_ids))
        except Exception as error:
            self._mark_failed(model, new, old, error)
            raise _as_inferd_error(error) from error
        return new, old

    def _mark_failed(
        self, model: _Model, new: ModelVersion, old: ModelVersion | None, error: Exception
    ) -> None:
        reason = _as_inferd_error(error).message
        logger.error("Could not load %s: %s", new.settings.label, reason)
        new.state = ModelState.UNAVAILABLE
        new.reason = reason
        if old is not None and old.state is ModelState.READY:
            # The index shows why the files on disk are not what is being served.
            old.reason = _reload_failed(reason)
            logger.warning(
                "%s keeps serving the previously loaded instance", _capitalized(old.settings.label)
            )

    async def unload(self, name: str) -> None:
        """Unload every version of ``name``; ModelNotFound if none is loaded."""
        model = self._models.get(name)
        if model is None:
            raise ModelNotFound(name)
        async with model.lock:
            for version in list(model.versions):
                await self._unload_version(model, version)
            if not model.versions and self._models.get(name) is model:
                del self._models[name]

    def reload_failed(self, name: str, reason: str) -> None:
        """Say in the index why the versions of ``name`` still serving are not what is on
        disk (its files could not be read: the registry never got to load them)."""
        model = self._models.get(name)
        for version in model.versions.values() if model else ():
            if version.state is ModelState.READY:
                version.reason = _reload_failed(reason)

    async def remove(self, name: str) -> None:
        """Take ``name`` out of service at once (a new request finds no such model: 404,
        not 503), then unload its versions once their requests in flight have ended:
        how a model whose folder was removed goes. Nothing to do if it is not loaded."""
        model = self._models.get(name)
        if model is None:
            return
        async with model.lock:
            if self._models.get(name) is model:
                del self._models[name]
            for version in list(model.versions):
                await self._unload_version(model, version)

    async def _unload_version(self, model: _Model, version: str | None) -> None:
        found = model.versions[version]
        found.state = ModelState.UNLOADING
        logger.info("Unloading %s", found.settings.label, extra=SERVER_EVENT)
        await found.retire()
        del model.versions[version]
        logger.info("Unloaded %s", found.settings.label, extra=SERVER_EVENT)

    async def close(self) -> None:
        for name in list(self._models):
            await self.unload(name)


def _default_version(versions: dict[str | None, ModelVersion]) -> ModelVersion:
    """The unversioned entry if there is one, else the highest READY version."""
    if None in versions:
        return versions[None]
    candidates = [v for v in versions.values() if v.state is ModelState.READY] or list(
        versions.values()
    )
    return max(candidates, key=lambda v: _natural_key(v.version or ""))


def _natural_key(text: str) -> list[tuple[int, int | str]]:
    """Sort key under which "v10" comes after "v9"."""
    return [
        (0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|\D+", text)
    ]


def _reload_failed(reason: str) -> str:
    return f"Reloading failed, the previous instance keeps serving: {reason}"


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _as_inferd_error(error: Exception) -> InferdError:
    if isinstance(error, InferdError):
        return error
    if isinstance(error, ConfigurationError):
        return InvalidRequest(str(error))
    return ModelError(str(error) or type(error).__name__)
