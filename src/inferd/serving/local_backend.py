"""This process's backend (serving/backends.py): versions run in its own pool,
reached through dispatch.

Each version loaded gets a :class:`~inferd.dispatch.scheduler.Scheduler` (its
queue, batcher or sequence holder and its slots), its counters in the server's
statistics (shared by every instance of a name and version, so they survive
reloads) and, when settings.json and its model-settings.json both turn it on, its
entries in the response cache.
"""

from __future__ import annotations

import logging

from inferd.dispatch.scheduler import Scheduler
from inferd.observability.stats import ModelStats, ModelStatsTable
from inferd.serving.backends import Opened
from inferd.serving.response_cache import ResponseCache, VersionCache
from inferd.settings import ModelSettings
from inferd.workers.base import Control, Pool

logger = logging.getLogger(__name__)


class LocalBackend:
    """Versions in ``pool``, dispatched here (a :class:`~inferd.serving.backends.Backend`)."""

    where = ""

    def __init__(
        self,
        pool: Pool,
        stats: ModelStatsTable,
        max_queue_size: int = 0,
        cache: ResponseCache | None = None,
    ) -> None:
        self.pool = pool
        self._stats = stats
        # The server's queue bound (settings.json), for versions that set none (0: none).
        self._max_queue_size = max_queue_size
        # The server's response cache (cache_enabled in settings.json), if on.
        self._cache = cache

    async def load(self, instance_id: int, settings: ModelSettings) -> Opened:
        instance = await self.pool.load(instance_id, settings)
        stats = self._stats.of(settings.name, settings.version)
        scheduler = Scheduler(
            self.pool,
            instance_id,
            settings,
            stats,
            instance.interleaved_streams,
            server_max_queue_size=self._max_queue_size,
        )
        return Opened(instance, scheduler, stats, self._bind_cache(settings, stats), scheduler)

    async def unload(self, instance_id: int) -> None:
        await self.pool.unload(instance_id)

    def instances(self, instance_id: int, settings: ModelSettings) -> int:
        return self.pool.capacity(instance_id) // settings.threads_per_worker

    def control(self, message: Control) -> None:
        self.pool.control(message)

    async def close(self) -> None:
        """Nothing: the pool is the server's, which closes it."""

    def _bind_cache(self, settings: ModelSettings, stats: ModelStats) -> VersionCache | None:
        """The version's response cache: on when both settings.json and its
        model-settings.json set cache_enabled (MLServer's rule)."""
        if not settings.cache_enabled:
            return None
        if self._cache is None:
            logger.warning(
                "%s sets cache_enabled, which has no effect: the server's response cache is "
                "off (set cache_enabled in settings.json too)",
                settings.label[:1].upper() + settings.label[1:],
            )
            return None
        return self._cache.bind(stats)
