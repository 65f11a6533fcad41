"""One model version, its instance, and where that instance runs.

The registry (registry.py) says which versions serve under each name and when a
new instance takes over from the old; this module is what each of them is: a
:class:`ModelVersion` (its settings, its state, and the instance that answers it,
loaded through a backend and retired through it), and :class:`Backends`, which
backend loads a version: this process's own (its pool, through dispatch), the
in-process one beside it, or the one a :class:`BackendChoice` names for it
(serving/backends.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from inferd.dispatch.scheduler import Scheduler
from inferd.observability.stats import ModelStats, ModelStatsTable
from inferd.serving.backends import Backend, BackendChoice, VersionCalls
from inferd.serving.declared_inputs import DeclaredInputs, enforced_inputs
from inferd.serving.local_backend import LocalBackend
from inferd.serving.response_cache import ResponseCache, VersionCache
from inferd.settings import ModelSettings
from inferd.settings.model import NamedBySettings
from inferd.triton.classification import Classifier
from inferd.types import ModelState
from inferd.workers.base import Control, LoadedInstance, Pool
from inferd.workers.inprocess import InProcessPool


@dataclass(slots=True)
class ModelVersion(NamedBySettings):
    """One version of a model and the instance that serves it."""

    settings: ModelSettings
    state: ModelState = ModelState.LOADING
    reason: str = ""
    instance: LoadedInstance | None = None  # what its backend loaded: metadata, how it answers
    # What loaded it and answers it (serving/backends.py), by this instance id.
    backend: Backend | None = None
    instance_id: int = 0
    calls: VersionCalls | None = None  # its infer and infer_stream; None once retired
    # This process's dispatch of it, when it runs here (its queue is a metric).
    scheduler: Scheduler | None = None
    load_seconds: float = 0.0  # how long loading this instance took
    # Its counters: shared by every instance of this name and version, so they
    # survive reloads.
    stats: ModelStats | None = None
    # Its entries in the response cache, when the server and the model turn it on.
    cache: VersionCache | None = None
    # The inputs its settings declare, checked on each request (None: none declared).
    declared: DeclaredInputs | None = None
    # Triton's classification of its outputs: whether it batches, its label files.
    classifier: Classifier | None = None

    async def load(self, backend: Backend, instance_id: int) -> None:
        """Its instance loaded by ``backend`` as ``instance_id`` (not serving yet);
        the load's error, once ``backend`` has let go of what it had loaded."""
        started = time.perf_counter()
        try:
            opened = await backend.load(instance_id, self.settings)
        except Exception:
            await backend.unload(instance_id)
            raise
        self.backend, self.instance_id, self.instance = backend, instance_id, opened.instance
        self.calls, self.scheduler = opened.calls, opened.scheduler
        self.stats, self.cache = opened.stats, opened.cache
        self.reason = opened.instance.reason  # where it runs, a failed reload's (kept serving)
        self.declared = enforced_inputs(self.settings)
        self.load_seconds = time.perf_counter() - started
        self.stats.loaded(self.load_seconds)  # model_load_seconds

    async def retire(self) -> None:
        """Its instance answers no more: its cache closed, its calls closed, and the
        backend that loaded it unloads it."""
        cache, self.cache = self.cache, None
        if cache is not None:
            cache.close()
        calls, self.calls = self.calls, None
        self.scheduler = None
        if calls is not None and self.backend is not None:
            await calls.close()
            await self.backend.unload(self.instance_id)


class Backends:
    """The backends this process's versions load on, and which one each uses."""

    def __init__(
        self,
        pool: Pool,
        stats: ModelStatsTable,
        max_queue_size: int,
        cache: ResponseCache | None,
        choice: BackendChoice | None,
        instance_failed: Callable[[int, str], None],
    ) -> None:
        """``pool``, ``max_queue_size`` and ``cache``: this process's own backend's;
        ``choice``: which versions another backend serves (None: this process's serves
        every one); ``instance_failed``: told when a pool gives up an instance."""
        self._local = LocalBackend(pool, stats, max_queue_size, cache)
        self._choice = choice
        # The versions the choice runs in this process beside the pool's workers.
        self._in_process: LocalBackend | None = None
        if choice is not None and choice.in_process is not None:
            in_process = InProcessPool()
            in_process.on_instance_failed(instance_failed)
            self._in_process = LocalBackend(in_process, stats, max_queue_size, cache)
        pool.on_instance_failed(instance_failed)

    def control(self, message: Control) -> None:
        """A feature's control message to every backend, where its instances run."""
        self._local.control(message)
        if self._in_process is not None:
            self._in_process.control(message)
        if self._choice is not None and self._choice.elsewhere is not None:
            self._choice.elsewhere.control(message)

    def of(self, settings: ModelSettings) -> Backend:
        """This process's backend, unless the choice names another for ``settings``."""
        choice = self._choice
        if choice is None or choice.here(settings):
            return self._local
        in_process = choice.in_process
        if self._in_process is not None and in_process is not None and in_process(settings):
            return self._in_process
        assert choice.elsewhere is not None  # served() left out what has no backend
        return choice.elsewhere
