"""Workers forked from a model's own parent (``fork_workers``), one pool per model instance.

With ``fork_workers`` on (by default: for models run by two or more workers), a
model that runs on the CPU gets a fork parent of its own
(:class:`~inferd.workers.fork_parent.ForkParent`, started with the
interpreter of the model's environment if it has one), which imports and loads
it once; its workers are forked from there and share the loaded model's pages
copy-on-write. Its workers form a :class:`~inferd.workers.pool.ProcessPool` of
their own (``workers`` of them, default ``parallel_workers``), so restarts,
retries and capacity are the pool's as for any model; a restart forks again from
the same parent, without loading the model again. Unloading the instance stops
its pool and its parent, so a model loaded again gets a new parent.

By default (``fork_workers`` left out) a model run by one worker is not forked
(:data:`MIN_FORKED_WORKERS`): a parent would only add a process. A model on a
GPU (a ``cuda:*`` device) is not forked: each process needs a CUDA context of
its own, which a fork cannot copy, so it loads in each worker as without
``fork_workers``. So does a model whose load leaves the parent unsafe to fork
(:mod:`inferd.workers.fork_safety`), with a warning saying why and what it costs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from inferd.errors import ConfigurationError, WorkerLost
from inferd.observability.stats import ModelStatsTable
from inferd.settings import ModelSettings, ServerSettings
from inferd.workers.base import Control
from inferd.workers.environments import WORKER_REQUIREMENTS, WorkerEnvironment
from inferd.workers.fork_parent import ForkedWorkerProcess, ForkParent
from inferd.workers.pool import ProcessPool
from inferd.workers.pool_defaults import LaterPools
from inferd.workers.process import WorkerProcess

logger = logging.getLogger(__name__)

# A model run by fewer workers is not forked by default (``fork_workers`` left out):
# its parent would be one process more, with no other worker to share its pages with.
MIN_FORKED_WORKERS = 2


def runs_on_gpu(settings: ModelSettings) -> bool:
    return bool(settings.cuda_devices)


@dataclass(slots=True)
class _Forked:
    parent: ForkParent
    pool: ProcessPool


class ForkedPools:
    """The fork parent and the pool of each forked model instance."""

    def __init__(self, settings: ServerSettings, stats: ModelStatsTable | None = None) -> None:
        self._settings = settings
        self._stats = stats
        self._forked: dict[int, _Forked] = {}
        self._later = LaterPools()  # what the pools of models forked later are told

    @property
    def pools(self) -> list[ProcessPool]:
        return [forked.pool for forked in self._forked.values()]

    def holds(self, instance_id: int) -> bool:
        return instance_id in self._forked

    async def pool_for(
        self,
        instance_id: int,
        settings: ModelSettings,
        environment: WorkerEnvironment | None,
        first_index: Callable[[int], int],
    ) -> ProcessPool | None:
        """A started pool of workers forked from a parent that loaded the model; None when
        the model must load in each worker instead. ``first_index(n)``: the index of the
        first of n workers. Raises the model's load error."""
        count = settings.workers or self._settings.parallel_workers
        by_default = self._settings.fork_workers is None
        if runs_on_gpu(settings) or (by_default and count < MIN_FORKED_WORKERS):
            return None
        parent = ForkParent(self._settings, settings, environment)
        try:
            why_not = await parent.start()
        except WorkerLost as error:
            if environment is None:
                raise
            raise ConfigurationError(
                f"{settings.label}: the fork parent in its environment {environment.root} "
                f"did not load it ({error.message}). The environment needs "
                f"{WORKER_REQUIREMENTS} installed, and the same Python minor version as the "
                "server."
            ) from None
        if why_not:
            logger.warning(
                "%s is loaded in each of its %d workers, not forked from one parent: after "
                "its load %s. It costs its memory and load time once per worker",
                settings.label,
                count,
                why_not,
            )
            return None
        pool = self._new_pool(parent, count, first_index(count))
        try:
            await pool.start()
        except BaseException:
            await parent.close()
            raise
        self._forked[instance_id] = _Forked(parent, pool)
        return pool

    def _new_pool(self, parent: ForkParent, count: int, first: int) -> ProcessPool:
        def make_worker(
            index: int, settings: ServerSettings, on_death: Callable[[WorkerProcess], None]
        ) -> WorkerProcess:
            return ForkedWorkerProcess(first + index, settings, on_death, parent)

        settings = self._settings.model_copy(update={"parallel_workers": count})
        pool = ProcessPool(settings, make_worker, stats=self._stats, load_together=True)
        return self._later.started(pool)

    async def release(self, instance_id: int) -> None:
        """Stop the instance's workers, then its parent (after the pool unloaded it)."""
        forked = self._forked.pop(instance_id, None)
        if forked is not None:
            await forked.pool.close()
            await forked.parent.close()

    async def close(self) -> None:
        for instance_id in list(self._forked):
            await self.release(instance_id)

    def control(self, message: Control) -> None:
        """Give every forked worker this message (one for every process), now and when
        they (re)start."""
        self._later.control(message, self.pools)

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        self._later.on_instance_failed(handler, self.pools)
