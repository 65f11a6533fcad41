"""The process pool (``parallel_workers: N > 0``): runtimes run in N worker processes.

The main process speaks the protocols; workers run models. Each model instance
lives in ``workers`` of them (default: all), picked among the least loaded, and
is loaded into one worker at a time so peak memory does not multiply. A request
goes to the least loaded worker holding its instance that has a free slot (the
scheduler never sends more than the instance's capacity: ``threads_per_worker``
per live worker holding it). A stream goes to a worker holding its instance
too: a plain generator's like a request (it holds a slot until it has
finished); an interleaved one (async generator) to the worker with the fewest
open streams. Its responses cross the IPC one by one as the model yields them
(:mod:`inferd.workers.remote_stream`, :mod:`inferd.workers.worker_streams`).

A worker that dies is noticed at once (its socket closes): it is restarted
(backing off if it keeps dying young) and the instances it held are loaded
again, while the other workers keep serving. Its requests in flight are sent
once more, each to a free slot of another worker holding its instance or of the
restarted one, ahead of new requests (:mod:`inferd.workers.retry`); those that
cannot be fail with WorkerLost (503) saying why. A stream running there fails
with WorkerLost too (streams are never retried). An instance whose load crashes
its worker ``MAX_LOAD_CRASHES`` times in a row is dropped from that worker; once
no worker holds it, the registry is told to mark it UNAVAILABLE with the reason.

A request of a sequence (sequence batching) goes to the worker holding the
sequence (:meth:`ProcessPool.predict_on`) and is never retried elsewhere.

A call of a model with an ``inference_timeout`` that runs past it is answered
with InferenceTimeout (504) and the worker running it is killed; its death then
goes as above. Being killed so does not count as dying young: the process did
not crash, and delaying its restart would only take capacity from its other models.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from inferd.errors import ConfigurationError, InferdError, ModelNotReady, WorkerLost
from inferd.observability.stats import ModelStatsTable
from inferd.observability.trace_record import BatchRun
from inferd.settings import ModelSettings, ServerSettings
from inferd.types import InferenceRequest
from inferd.workers.base import Execution, Holder, LoadedInstance, ResponseStream
from inferd.workers.process import WorkerProcess
from inferd.workers.retry import SentCalls

logger = logging.getLogger(__name__)

# Delay before restarting a worker, by how many times in a row it died young.
RESTART_BACKOFF = (0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 5.0)
# A worker that served this long before dying is restarted without delay.
STABLE_AFTER = 30.0
# An instance whose load crashes a worker this many times in a row is dropped there.
MAX_LOAD_CRASHES = 3
# Longest a request whose worker died waits for a free slot to be sent again (a
# restart and the reload of its model included), in seconds.
RETRY_WAIT = 30.0


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When a dead worker starts again, and when a worker gives up on an instance."""

    backoff: tuple[float, ...] = RESTART_BACKOFF
    stable_after: float = STABLE_AFTER
    max_load_crashes: int = MAX_LOAD_CRASHES
    retry_wait: float = RETRY_WAIT

    def delay(self, quick_deaths: int) -> float:
        """Seconds to wait before restarting a worker that died young this many times."""
        return self.backoff[min(quick_deaths, len(self.backoff) - 1)]


# Makes worker ``index``, which calls ``on_death(worker)`` when its process dies.
WorkerFactory = Callable[[int, ServerSettings, Callable[[WorkerProcess], None]], WorkerProcess]


@dataclass(slots=True, eq=False)
class _Instance:
    settings: ModelSettings
    holders: list[WorkerProcess]
    capacity: int = 0
    listeners: list[Callable[[], None]] = field(default_factory=list)
    load_crashes: dict[int, int] = field(default_factory=dict)
    failed: str = ""  # why no worker serves it any more
    interleaved_streams: bool = False  # its predict_stream is an async generator
    # Its settings with retries off, for sequence requests that have a timeout (made once).
    sequence_settings: ModelSettings | None = None

    @property
    def name(self) -> str:
        return self.settings.name


class ProcessPool:
    """Starts, feeds, watches and restarts the worker processes."""

    def __init__(
        self,
        settings: ServerSettings,
        make_worker: WorkerFactory = WorkerProcess,
        policy: RestartPolicy = RestartPolicy(),  # frozen: safe to share
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,  # tests skip the back-off
        stats: ModelStatsTable | None = None,  # where inference timeouts are counted
        load_together: bool = False,  # forked workers: see _load_all
    ) -> None:
        self._settings = settings
        self._load_together = load_together
        self._policy = policy
        self._sleep = sleep
        # Requests followed until answered: retried if their worker dies, or timed.
        self._sent = SentCalls(self._free_holder, self._unservable, policy.retry_wait, stats)
        self._workers = [
            make_worker(index, settings, self._worker_died)
            for index in range(settings.parallel_workers)
        ]
        self._instances: dict[int, _Instance] = {}
        self._restart_tasks: dict[int, asyncio.Task[None]] = {}
        self._failure_handler: Callable[[int, str], None] | None = None
        self._closing = False

    @property
    def workers(self) -> list[WorkerProcess]:
        return list(self._workers)

    async def start(self) -> None:
        results = await asyncio.gather(
            *(worker.start() for worker in self._workers), return_exceptions=True
        )
        failures = [result for result in results if isinstance(result, BaseException)]
        if failures:
            await self.close()
            raise ConfigurationError(f"Could not start the worker processes: {failures[0]}")

    async def close(self) -> None:
        self._closing = True
        for task in self._restart_tasks.values():
            task.cancel()
        self._sent.close()
        timeout = self._settings.parallel_workers_timeout
        await asyncio.gather(*(worker.stop(timeout) for worker in self._workers))

    # Loading

    async def load(self, instance_id: int, settings: ModelSettings) -> LoadedInstance:
        holders = self._choose_holders(settings)
        instance = _Instance(settings, list(holders))
        self._instances[instance_id] = instance
        loaded: LoadedInstance | None = None
        try:
            if self._load_together:
                loaded = await self._load_all(instance_id, instance)
            else:
                loaded = await self._load_one_by_one(instance_id, instance)
        except BaseException:
            await self.unload(instance_id)
            raise
        if loaded is None:
            await self.unload(instance_id)
            raise self._no_worker_error(settings.name)
        return loaded

    async def _load_one_by_one(
        self, instance_id: int, instance: _Instance
    ) -> LoadedInstance | None:
        """Load the instance into its holders one after another (peak memory: one load)."""
        loaded: LoadedInstance | None = None
        for worker in list(instance.holders):
            if worker.alive:
                loaded = await self._load_into(worker, instance_id, instance)
            else:  # died since it was chosen: not this model's fault
                instance.holders.remove(worker)
        return loaded

    async def _load_all(self, instance_id: int, instance: _Instance) -> LoadedInstance | None:
        """Load the instance into all its holders at once: workers forked from a parent
        holding the model only adopt it and warm up, so memory does not multiply."""
        instance.holders = [worker for worker in instance.holders if worker.alive]
        results = await asyncio.gather(
            *(self._load_into(worker, instance_id, instance) for worker in instance.holders),
            return_exceptions=True,
        )
        loaded: LoadedInstance | None = None
        for result in results:
            if isinstance(result, BaseException):
                raise result
            loaded = result
        return loaded

    def _choose_holders(self, settings: ModelSettings) -> list[WorkerProcess]:
        alive = [worker for worker in self._workers if worker.alive]
        if not alive:
            raise self._no_worker_error(settings.name)
        wanted = settings.workers or len(self._workers)
        if wanted > len(self._workers):
            logger.warning(
                "Model %r asks for %d workers but the server has %d; it is loaded in all",
                settings.name,
                wanted,
                len(self._workers),
            )

        def models_held(worker: WorkerProcess) -> int:
            return sum(worker in instance.holders for instance in self._instances.values())

        return sorted(alive, key=lambda worker: (models_held(worker), worker.index))[:wanted]

    def _no_worker_error(self, name: str) -> WorkerLost:
        return WorkerLost(
            f"Cannot load model {name!r}: no worker process is running right now "
            "(they are being restarted); try again shortly"
        )

    async def _load_into(
        self, worker: WorkerProcess, instance_id: int, instance: _Instance
    ) -> LoadedInstance:
        devices = instance.settings.devices
        device = devices[worker.index % len(devices)] if devices else None
        loaded = await worker.load(instance_id, instance.settings, device)
        instance.interleaved_streams = loaded.interleaved_streams
        self._update_capacity(instance_id)
        return loaded

    async def unload(self, instance_id: int) -> None:
        instance = self._instances.pop(instance_id, None)
        if instance is None:
            return
        instance.listeners.clear()
        self._sent.unservable(instance_id, self._gone_error())
        for worker in instance.holders:
            await worker.unload(instance_id)

    # Serving

    def predict(
        self, instance_id: int, request: InferenceRequest, run: BatchRun | None = None
    ) -> Execution:
        """Send the request to a worker now (so a slot handed on is used at once)."""
        instance = self._serving(instance_id)
        worker = self._pick(instance_id, instance)
        if worker is None:
            raise self._unavailable_error(instance)
        settings = instance.settings
        if settings.retry_on_worker_failure or settings.inference_timeout:
            return Execution.sent(self._sent.send(instance_id, settings, request, worker, run))
        return Execution.sent(worker.predict(instance_id, request, run=run))

    def stream(self, instance_id: int, request: InferenceRequest) -> ResponseStream:
        """Start the stream in a worker now; it is never retried elsewhere."""
        instance = self._serving(instance_id)
        interleaved = instance.interleaved_streams
        if interleaved:
            worker = self._pick_for_stream(instance_id, instance)
        else:
            worker = self._pick(instance_id, instance)
        if worker is None:
            raise self._unavailable_error(instance)
        return worker.stream(instance_id, request, holds_slot=not interleaved)

    # Sequences: each runs on one holder, (worker index, starts), never retried elsewhere.

    def holders(self, instance_id: int) -> list[Holder]:
        instance = self._instances.get(instance_id)
        serving = instance.holders if instance is not None else []
        return [(w.index, w.starts) for w in serving if w.serves(instance_id)]

    def predict_on(
        self,
        instance_id: int,
        holder: Holder,
        request: InferenceRequest,
        run: BatchRun | None = None,
    ) -> Execution:
        instance = self._serving(instance_id)
        worker = self._holding(instance_id, holder)
        if not instance.settings.inference_timeout:
            return Execution.sent(worker.predict(instance_id, request, run=run))
        if instance.sequence_settings is None:
            once = {"retry_on_worker_failure": False}  # its state lives in the worker that died
            instance.sequence_settings = instance.settings.model_copy(update=once)
        return Execution.sent(
            self._sent.send(instance_id, instance.sequence_settings, request, worker, run)
        )

    def stream_on(
        self, instance_id: int, holder: Holder, request: InferenceRequest
    ) -> ResponseStream:
        interleaved = self._serving(instance_id).interleaved_streams
        worker = self._holding(instance_id, holder)
        return worker.stream(instance_id, request, holds_slot=not interleaved)

    def _holding(self, instance_id: int, holder: Holder) -> WorkerProcess:
        """The live worker that is ``holder``; WorkerLost if it stopped since."""
        index, starts = holder
        for worker in self._workers:  # by index: a pool's workers need not count from 0
            if worker.index == index and worker.starts == starts and worker.serves(instance_id):
                return worker
        raise WorkerLost(f"worker {index} stopped since the sequence started")

    def end_sequence(self, instance_id: int, holder: Holder, sequence_id: int | str) -> None:
        with contextlib.suppress(WorkerLost):  # stopped: its state went with it
            self._holding(instance_id, holder).end_sequence(instance_id, sequence_id)

    def _serving(self, instance_id: int) -> _Instance:
        instance = self._instances.get(instance_id)
        if instance is None:
            raise self._gone_error()
        return instance

    def _gone_error(self) -> ModelNotReady:
        return ModelNotReady("This model version is no longer loaded; retry the request")

    def _free_holder(self, instance_id: int) -> WorkerProcess | None:
        """A live worker holding the instance with a free slot, if any (for a retry)."""
        instance = self._instances.get(instance_id)
        worker = self._pick(instance_id, instance) if instance is not None else None
        return worker if worker is not None and worker.free_slots(instance_id) > 0 else None

    def _unservable(self, instance_id: int) -> InferdError | None:
        """Why the instance will not be served again (None: it may be, if not now)."""
        instance = self._instances.get(instance_id)
        if instance is None:
            return self._gone_error()
        if self._closing:
            return WorkerLost("The server is shutting down")
        return self._unavailable_error(instance) if instance.failed else None

    def _pick(self, instance_id: int, instance: _Instance) -> WorkerProcess | None:
        """The least loaded live worker holding the instance, with a free slot if any has."""
        best: WorkerProcess | None = None
        best_free = False
        for worker in instance.holders:
            if not worker.serves(instance_id):
                continue
            free = worker.free_slots(instance_id) > 0
            if (
                best is None
                or (free and not best_free)
                or (free == best_free and worker.outstanding < best.outstanding)
            ):
                best, best_free = worker, free
        return best

    def _pick_for_stream(self, instance_id: int, instance: _Instance) -> WorkerProcess | None:
        """The live worker holding the instance with the fewest open interleaved streams."""
        serving = [worker for worker in instance.holders if worker.serves(instance_id)]
        return min(serving, key=lambda worker: worker.open_streams, default=None)

    def _unavailable_error(self, instance: _Instance) -> InferdError:
        if instance.failed:
            return ModelNotReady(f"Model {instance.name!r} is unavailable: {instance.failed}")
        return WorkerLost(
            f"No worker process holding model {instance.name!r} is running right now (it "
            "stopped and is being restarted); retry the request shortly"
        )

    def capacity(self, instance_id: int) -> int:
        instance = self._instances.get(instance_id)
        return instance.capacity if instance is not None else 0

    def watch(self, instance_id: int, on_capacity_change: Callable[[], None]) -> None:
        instance = self._instances.get(instance_id)
        if instance is not None:
            instance.listeners.append(on_capacity_change)

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        self._failure_handler = handler

    def set_log_level(self, level: int) -> None:
        for worker in self._workers:  # each keeps it for its restarts
            worker.set_log_level(level)

    def _update_capacity(self, instance_id: int) -> None:
        instance = self._instances.get(instance_id)
        if instance is None:
            return
        capacity = sum(worker.slots(instance_id) for worker in instance.holders)
        if capacity != instance.capacity:
            instance.capacity = capacity
            # Retries first: their requests hold their scheduler slots already.
            self._sent.send_retries(instance_id)
            for listener in list(instance.listeners):
                listener()

    # Deaths and restarts

    def _worker_died(self, worker: WorkerProcess) -> None:
        for instance_id, instance in list(self._instances.items()):
            if worker in instance.holders:
                self._update_capacity(instance_id)
        if self._closing:
            return
        worker.record_death(
            young=worker.uptime < self._policy.stable_after and not worker.kill_reason
        )
        restart = self._restart_tasks.get(worker.index)
        if restart is None or restart.done():
            # A running restart notices the death itself and goes round again.
            self._restart_tasks[worker.index] = asyncio.create_task(
                self._restart(worker), name=f"restart-worker-{worker.index}"
            )

    async def _restart(self, worker: WorkerProcess) -> None:
        while not self._closing:
            status = await worker.exit_status()
            delay = self._policy.delay(worker.quick_deaths)
            logger.error("%s %s; restarting it in %.2fs", worker.label, status, delay)
            await self._sleep(delay)
            try:
                await worker.start()
            except (WorkerLost, OSError) as error:
                logger.error("%s", error)
                worker.record_death(young=True)
                continue
            logger.info("Restarted %s (%d restarts so far)", worker.label, worker.restarts)
            await self._reload(worker)
            if worker.alive:
                return

    async def _reload(self, worker: WorkerProcess) -> None:
        """Load the instances the worker held again, oldest first, until done or it dies."""
        while worker.alive and (instance_id := worker.next_to_reload()) is not None:
            instance = self._instances.get(instance_id)
            if instance is None or worker not in instance.holders:
                worker.cancel_reload(instance_id)
                continue
            try:
                await self._load_into(worker, instance_id, instance)
            except WorkerLost as error:
                self._load_crashed(worker, instance_id, instance, error)
                return
            except (InferdError, ConfigurationError) as error:
                worker.cancel_reload(instance_id)
                reason = f"reloading it after its worker restarted failed: {error}"
                self._drop_holder(worker, instance_id, instance, reason)
                continue
            instance.load_crashes.pop(worker.index, None)
            if self._instances.get(instance_id) is not instance:
                await worker.unload(instance_id)  # unloaded meanwhile

    def _load_crashed(
        self, worker: WorkerProcess, instance_id: int, instance: _Instance, error: WorkerLost
    ) -> None:
        crashes = instance.load_crashes.get(worker.index, 0) + 1
        instance.load_crashes[worker.index] = crashes
        if crashes >= self._policy.max_load_crashes:
            worker.cancel_reload(instance_id)
            reason = (
                f"{error.message} ({crashes} times in a row, so it is no longer loaded "
                "there). Fix the model, then load it again."
            )
            self._drop_holder(worker, instance_id, instance, reason)

    def _drop_holder(
        self, worker: WorkerProcess, instance_id: int, instance: _Instance, reason: str
    ) -> None:
        with contextlib.suppress(ValueError):
            instance.holders.remove(worker)
        logger.error("Model %r is no longer served by %s: %s", instance.name, worker.label, reason)
        if instance.holders:
            return
        instance.failed = reason
        self._update_capacity(instance_id)
        self._sent.unservable(instance_id, self._unavailable_error(instance))
        if self._failure_handler is not None:
            self._failure_handler(instance_id, reason)
