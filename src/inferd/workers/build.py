"""The pool a server runs its models in, as its settings say."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from inferd.observability.stats import ModelStatsTable
from inferd.settings import ServerSettings
from inferd.workers.base import Pool
from inferd.workers.inprocess import InProcessPool

if TYPE_CHECKING:
    from inferd.workers.process import WorkerProcess


def build_pool(
    settings: ServerSettings, stats: ModelStatsTable | None = None
) -> tuple[Pool, Callable[[], Sequence[WorkerProcess]]]:
    """Worker processes for ``parallel_workers: N > 0``, else the main process, and
    how to list the pool's worker processes for the metrics (none in process).
    ``stats``: where the process pool counts inference timeouts."""
    if settings.parallel_workers == 0:
        return InProcessPool(), tuple
    from inferd.workers.env_pools import EnvironmentPools

    pools = EnvironmentPools(settings, stats=stats)
    return pools, lambda: pools.workers
