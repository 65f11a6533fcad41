"""Worker pools per Python environment: the server's own pool for most models, and
one pool of worker processes per model environment (see :mod:`.environments`).

The server's ``parallel_workers`` processes all run the server's interpreter, and
every model may be loaded in any of them. A model with its own environment needs
processes started with that environment's interpreter, so each environment gets a
:class:`~inferd.workers.pool.ProcessPool` of its own, of ``parallel_workers``
processes, started when its first model loads and stopped when its last model is
unloaded. Models naming the same environment share its pool. Its workers are
numbered after the server's (and each other's), so worker metrics and logs never
mix them up. Everything else (restarts, retries, capacity) is the ProcessPool's.

With ``fork_workers``, an instance goes first to :mod:`.forked_pools` (workers of
its own, forked from a parent that loaded it); only one that is not forked comes
to the pools above, and the server's pool starts when the first such one loads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from inferd.errors import ConfigurationError
from inferd.observability.stats import ModelStatsTable
from inferd.settings import ModelSettings, ServerSettings
from inferd.workers.base import (
    Call,
    Control,
    Execution,
    Holder,
    LoadedInstance,
    ResponseStream,
)
from inferd.workers.environments import (
    WORKER_REQUIREMENTS,
    WorkerEnvironment,
    WorkerImportPath,
    environment_of,
)
from inferd.workers.forked_pools import MIN_FORKED_WORKERS, ForkedPools
from inferd.workers.pool import ProcessPool
from inferd.workers.pool_defaults import LaterPools
from inferd.workers.process import WorkerProcess

logger = logging.getLogger(__name__)


class EnvironmentPools:
    """A Pool that sends each instance to the pool of its model's environment."""

    def __init__(self, settings: ServerSettings, stats: ModelStatsTable | None = None) -> None:
        self._settings = settings
        self._stats = stats
        self.default = ProcessPool(settings, stats=stats)
        self._pools: dict[Path, ProcessPool] = {}  # by environment
        self._users: dict[Path, set[int]] = {}  # instances loaded in each environment
        self._by_instance: dict[int, ProcessPool] = {}
        self._environment_of: dict[int, Path] = {}
        self._next_index = settings.parallel_workers  # the first environment worker's
        self._import_path = WorkerImportPath()
        self._lock = asyncio.Lock()
        self._later = LaterPools()  # what environment pools started later are told
        # fork_workers (on unless false): CPU models get workers of their own, forked
        # from a parent that loaded them; the server's pool then starts when a model
        # first needs it.
        forking = settings.fork_workers is not False
        self._forked = ForkedPools(settings, stats) if forking else None
        self._default_started = False

    @property
    def workers(self) -> list[WorkerProcess]:
        pools = [*self._shared_pools(), *self._forked_pools()]
        return [worker for pool in pools for worker in pool.workers]

    def _shared_pools(self) -> list[ProcessPool]:
        """The server's pool and the environments': workers that hold several models."""
        return [self.default, *self._pools.values()]

    def _forked_pools(self) -> list[ProcessPool]:
        return self._forked.pools if self._forked is not None else []

    async def start(self) -> None:
        # Started now when its models are not forked: without fork_workers, or by
        # default with one worker (forked_pools.MIN_FORKED_WORKERS), so that the first
        # load does not wait for it.
        unforked = self._settings.fork_workers is None and (
            self._settings.parallel_workers < MIN_FORKED_WORKERS
        )
        if self._forked is None or unforked:
            await self._start_default()

    async def _start_default(self) -> None:
        async with self._lock:
            if not self._default_started:
                await self.default.start()
                self._default_started = True

    async def close(self) -> None:
        if self._forked is not None:
            await self._forked.close()
        await asyncio.gather(*(pool.close() for pool in self._shared_pools()))
        self._pools.clear()
        self._import_path.remove()

    async def load(self, instance_id: int, settings: ModelSettings) -> LoadedInstance:
        environment = await asyncio.to_thread(
            environment_of, settings, self._settings.environments_dir
        )
        pool = await self._forked_pool(instance_id, settings, environment)
        if pool is None:
            pool = await self._unforked_pool(instance_id, settings, environment)
        if environment is not None:
            self._environment_of[instance_id] = environment
        self._by_instance[instance_id] = pool
        return await pool.load(instance_id, settings)

    async def _unforked_pool(
        self, instance_id: int, settings: ModelSettings, environment: Path | None
    ) -> ProcessPool:
        """The server's pool, or the environment's: workers that hold several models."""
        if environment is not None:
            return await self._pool_for(environment, settings, instance_id)
        await self._start_default()
        return self.default

    async def _forked_pool(
        self, instance_id: int, settings: ModelSettings, environment: Path | None
    ) -> ProcessPool | None:
        """The pool of workers forked for this instance (None: it is not forked)."""
        if self._forked is None:
            return None
        where = None
        if environment is not None:
            where = WorkerEnvironment(environment, self._import_path.folder())
        return await self._forked.pool_for(instance_id, settings, where, self._take_indices)

    def _take_indices(self, count: int) -> int:
        """The index of the first of ``count`` new workers (indices are never reused)."""
        first = self._next_index
        self._next_index += count
        return first

    async def _pool_for(
        self, environment: Path, settings: ModelSettings, instance_id: int
    ) -> ProcessPool:
        """The environment's pool (started now if it is the first to need it), with
        ``instance_id`` counted among its users."""
        async with self._lock:
            pool = self._pools.get(environment)
            if pool is not None:
                self._users[environment].add(instance_id)
                return pool
            logger.info("Starting worker processes in environment %s", environment)
            pool = self._new_pool(WorkerEnvironment(environment, self._import_path.folder()))
            try:
                await pool.start()
            except ConfigurationError as error:
                raise ConfigurationError(
                    f"{settings.label}: the worker processes of its environment {environment} "
                    f"did not start ({error}). The environment needs {WORKER_REQUIREMENTS} "
                    "installed, and the same Python minor version as the server."
                ) from None
            self._pools[environment] = pool
            self._users[environment] = {instance_id}
            return pool

    def _new_pool(self, environment: WorkerEnvironment) -> ProcessPool:
        first = self._take_indices(self._settings.parallel_workers)

        def make_worker(
            index: int, settings: ServerSettings, on_death: Callable[[WorkerProcess], None]
        ) -> WorkerProcess:
            return WorkerProcess(first + index, settings, on_death, environment)

        return self._later.started(ProcessPool(self._settings, make_worker, stats=self._stats))

    async def unload(self, instance_id: int) -> None:
        pool = self._by_instance.pop(instance_id, None)
        if pool is None:
            return
        await pool.unload(instance_id)
        if self._forked is not None and self._forked.holds(instance_id):
            self._environment_of.pop(instance_id, None)
            await self._forked.release(instance_id)  # a reload gets a new parent
            return
        environment = self._environment_of.pop(instance_id, None)
        if environment is None:
            return
        users = self._users[environment]
        users.discard(instance_id)
        async with self._lock:
            if not users and self._pools.get(environment) is pool:
                logger.info("Stopping the worker processes of environment %s", environment)
                del self._pools[environment], self._users[environment]
                await pool.close()

    def _pool(self, instance_id: int) -> ProcessPool:
        return self._by_instance.get(instance_id, self.default)

    def predict(self, call: Call) -> Execution:
        return self._pool(call.instance_id).predict(call)

    def stream(self, call: Call) -> ResponseStream:
        return self._pool(call.instance_id).stream(call)

    def control(self, message: Control) -> None:
        destination = message.destination()
        if destination is not None:
            self._pool(destination.instance_id).control(message)
            return
        self._later.control(message, self._shared_pools())
        if self._forked is not None:
            self._forked.control(message)

    def holders(self, instance_id: int) -> list[Holder]:
        return self._pool(instance_id).holders(instance_id)

    def capacity(self, instance_id: int) -> int:
        return self._pool(instance_id).capacity(instance_id)

    def restarting(self, instance_id: int) -> bool:
        return self._pool(instance_id).restarting(instance_id)

    def watch(self, instance_id: int, on_change: Callable[[], None]) -> None:
        self._pool(instance_id).watch(instance_id, on_change)

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        self._later.on_instance_failed(handler, self._shared_pools())
        if self._forked is not None:
            self._forked.on_instance_failed(handler)
