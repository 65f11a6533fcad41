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
again, while the other workers keep serving (new requests wait for it if it was
the last). Its requests in flight are sent once more, each to a free slot of
another worker holding its instance or of the restarted one, ahead of new
requests (:mod:`inferd.workers.retry`), except one that was running there alone:
the suspect of the death, it is not retried. Those not retried fail with
WorkerLost (503) saying why. A stream running there fails
with WorkerLost too (streams are never retried). An instance whose load crashes
its worker ``MAX_LOAD_CRASHES`` times in a row is dropped from that worker; once
no worker holds it, the registry is told to mark it UNAVAILABLE with the reason.

A call naming its holder (a sequence's) goes to that worker, as long as it is the same
process, and is never retried elsewhere. A call of a model with an ``inference_timeout``
that runs past it is answered with InferenceTimeout (504) and the worker running it is
killed; its death then goes as above. Being killed so does not count as dying young: the
process did not crash, and delaying its restart would only take capacity from its models.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from inferd.errors import ConfigurationError, InferdError, ModelNotReady, WorkerLost
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
from inferd.workers.process import WorkerProcess
from inferd.workers.retry import SentCalls
from inferd.workers.worker_assignment import (
    DEFAULT_RESTART_POLICY,
    Instance,
    RestartPolicy,
    choose_holders,
    pick,
    pick_for_stream,
)

logger = logging.getLogger(__name__)

# Makes worker ``index``, which calls ``on_death(worker)`` when its process dies.
WorkerFactory = Callable[[int, ServerSettings, Callable[[WorkerProcess], None]], WorkerProcess]


class ProcessPool:
    """Starts, feeds, watches and restarts the worker processes."""

    def __init__(
        self,
        settings: ServerSettings,
        make_worker: WorkerFactory = WorkerProcess,
        policy: RestartPolicy = DEFAULT_RESTART_POLICY,
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
        self._instances: dict[int, Instance] = {}
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
        alive = [worker for worker in self._workers if worker.alive]
        if not alive:
            raise self._no_worker_error(settings.name)
        holders = choose_holders(settings, alive, len(self._workers), self._instances.values())
        instance = Instance(settings, list(holders))
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

    async def _load_one_by_one(self, instance_id: int, instance: Instance) -> LoadedInstance | None:
        """Load the instance into its holders one after another (peak memory: one load)."""
        loaded: LoadedInstance | None = None
        for worker in list(instance.holders):
            if worker.alive:
                loaded = await self._load_into(worker, instance_id, instance)
            else:  # died since it was chosen: not this model's fault
                instance.holders.remove(worker)
        return loaded

    async def _load_all(self, instance_id: int, instance: Instance) -> LoadedInstance | None:
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

    def _no_worker_error(self, name: str) -> WorkerLost:
        return WorkerLost(
            f"Cannot load model {name!r}: no worker process is running right now "
            "(they are being restarted); try again shortly"
        )

    async def _load_into(
        self, worker: WorkerProcess, instance_id: int, instance: Instance
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

    def predict(self, call: Call) -> Execution:
        """Send the call to a worker now (so a slot handed on is used at once)."""
        instance = self._serving(call.instance_id)
        if call.holder is not None:
            return self._predict_on(instance, call)
        worker = pick(call.instance_id, instance, call.request)
        if worker is None:
            raise self._unavailable_error(instance)
        settings = instance.settings
        if settings.retry_on_worker_failure or settings.inference_timeout:
            sent = self._sent.send(call, settings, worker)
            return Execution.sent(sent.answer, sent.cancel)
        running = worker.predict(call)
        return Execution.sent(running, partial(worker.cancel, running))

    def _predict_on(self, instance: Instance, call: Call) -> Execution:
        """On the call's holder (a sequence's), never retried elsewhere."""
        assert call.holder is not None
        worker = self._holding(call.instance_id, call.holder)
        if not instance.settings.inference_timeout:
            running = worker.predict(call)
            return Execution.sent(running, partial(worker.cancel, running))
        if instance.sequence_settings is None:
            once = {"retry_on_worker_failure": False}  # its state lives in the worker that died
            instance.sequence_settings = instance.settings.model_copy(update=once)
        sent = self._sent.send(call, instance.sequence_settings, worker)
        return Execution.sent(sent.answer, sent.cancel)

    def stream(self, call: Call) -> ResponseStream:
        """Start the stream in a worker now; it is never retried elsewhere."""
        instance_id = call.instance_id
        instance = self._serving(instance_id)
        interleaved = instance.interleaved_streams
        if call.holder is not None:
            worker: WorkerProcess | None = self._holding(instance_id, call.holder)
        elif interleaved:
            worker = pick_for_stream(instance_id, instance, call.request)
        else:
            worker = pick(instance_id, instance, call.request)
        if worker is None:
            raise self._unavailable_error(instance)
        return worker.stream(call, holds_slot=not interleaved)

    def control(self, message: Control) -> None:
        destination = message.destination()
        if destination is not None:
            with contextlib.suppress(WorkerLost):  # stopped: its state went with it
                self._holding(destination.instance_id, destination.holder).control(message)
            return
        for worker in self._workers:  # each keeps the message for its restarts
            worker.control(message)

    def holders(self, instance_id: int) -> list[Holder]:
        """Each live worker serving the instance, as (index, starts): a restarted
        worker is a new holder (the state its previous process kept is gone)."""
        instance = self._instances.get(instance_id)
        serving = instance.holders if instance is not None else []
        return [(w.index, w.starts) for w in serving if w.serves(instance_id)]

    def _holding(self, instance_id: int, holder: Holder) -> WorkerProcess:
        """The live worker that is ``holder``; WorkerLost if it stopped since."""
        index, starts = holder
        for worker in self._workers:  # by index: a pool's workers need not count from 0
            if worker.index == index and worker.starts == starts and worker.serves(instance_id):
                return worker
        raise WorkerLost(f"worker {index} stopped since the sequence started")

    def _serving(self, instance_id: int) -> Instance:
        instance = self._instances.get(instance_id)
        if instance is None:
            raise self._gone_error()
        return instance

    def _gone_error(self) -> ModelNotReady:
        return ModelNotReady("This model version is no longer loaded; retry the request")

    def _free_holder(self, instance_id: int) -> WorkerProcess | None:
        """A live worker holding the instance with a free slot, if any (for a retry)."""
        instance = self._instances.get(instance_id)
        worker = pick(instance_id, instance) if instance is not None else None
        return worker if worker is not None and worker.free_slots(instance_id) > 0 else None

    def _unservable(self, instance_id: int) -> InferdError | None:
        """Why the instance will not be served again (None: it may be, if not now)."""
        instance = self._instances.get(instance_id)
        if instance is None:
            return self._gone_error()
        if self._closing:
            return WorkerLost("The server is shutting down")
        return self._unavailable_error(instance) if instance.failed else None

    def _unavailable_error(self, instance: Instance) -> InferdError:
        if instance.failed:
            return ModelNotReady(f"Model {instance.name!r} is unavailable: {instance.failed}")
        return WorkerLost(
            f"No worker process holding model {instance.name!r} is running right now (it "
            "stopped and is being restarted); retry the request shortly"
        )

    def capacity(self, instance_id: int) -> int:
        instance = self._instances.get(instance_id)
        return instance.capacity if instance is not None else 0

    def restarting(self, instance_id: int) -> bool:  # its holders died (none if given up)
        return self._unservable(instance_id) is None

    def watch(self, instance_id: int, on_change: Callable[[], None]) -> None:
        instance = self._instances.get(instance_id)
        if instance is not None:
            instance.listeners.append(on_change)

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        self._failure_handler = handler

    def _update_capacity(self, instance_id: int) -> None:
        instance = self._instances.get(instance_id)
        if instance is None:
            return
        capacity = sum(worker.slots(instance_id) for worker in instance.holders)
        if capacity != instance.capacity or instance.failed:  # waiters for a restart: refused
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
        self, worker: WorkerProcess, instance_id: int, instance: Instance, error: WorkerLost
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
        self, worker: WorkerProcess, instance_id: int, instance: Instance, reason: str
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
