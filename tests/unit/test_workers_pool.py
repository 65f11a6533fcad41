"""The process pool's placement, restart and back-off logic, on fake workers.

A fake worker is the real WorkerProcess (its bookkeeping is under test too) with
its process replaced: ``_spawn`` returns a fake channel that answers commands as
the test scripts it, and ``_reap`` says the process was killed. No process starts
and no back-off delay is slept: the pool's ``sleep`` only records it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest

from inferd.errors import (
    ConfigurationError,
    ModelError,
    ModelNotReady,
    WorkerLost,
    WorkerLostUnread,
)
from inferd.observability.stats import ModelStatsTable
from inferd.settings import ModelSettings, ServerSettings
from inferd.triton.logsettings import SetLogLevel
from inferd.types import InferenceRequest, InferenceResponse, ModelMetadata, Tensor
from inferd.workers import messages
from inferd.workers.base import Call, LoadedInstance
from inferd.workers.pool import ProcessPool, RestartPolicy
from inferd.workers.process import WorkerProcess
from inferd.workers.spawn import describe_exit
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio

KILLED = describe_exit(-9)
DEFAULTS = RestartPolicy()
REQUEST = InferenceRequest([Tensor("x", np.zeros((1, 2), dtype=np.float32))])


class FakeChannel:
    """A worker's socket, without the worker: commands are answered by its script."""

    def __init__(self, worker: FakeWorker) -> None:
        self._worker = worker
        self._describe_loss = worker._describe_loss
        self._pending: list[asyncio.Future[Any]] = []
        self.closed = False
        self.unread_work = 0

    def start_call(
        self, command: messages.Command, instance_id: int = 0, decode: Any = None
    ) -> asyncio.Future[Any]:
        if self.closed:
            raise WorkerLost(self._describe_loss())
        future = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        self._worker.received(type(command), instance_id, command, future)
        return future

    async def call(self, command: messages.Command, instance_id: int = 0) -> Any:
        return await self.start_call(command, instance_id)

    def abort(self) -> None:
        self.close()

    def close(self, unread: int = 0) -> None:
        """The socket closed: calls waiting fail with WorkerLost (the last ``unread``
        requests, which the worker had not read, with WorkerLostUnread), the worker is
        told."""
        if self.closed:
            return
        self.closed = True
        waiting = [future for future in self._pending if not future.done()]
        for index, future in enumerate(waiting):
            lost = WorkerLostUnread if index >= len(waiting) - unread else WorkerLost
            future.set_exception(lost(self._describe_loss()))
        self.unread_work = unread
        self._worker._channel_closed()


class FakeWorker(WorkerProcess):
    """A WorkerProcess whose process is a script: what its loads and starts do."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.commands: list[tuple[int, int]] = []  # (kind, instance_id) as received
        self.requests: list[asyncio.Future[Any]] = []  # predicts waiting for an answer
        self.loading: list[asyncio.Future[None]] = []
        self.failed_starts_to_come = 0
        self.crash_loading: set[str] = set()  # models whose load kills it
        self.crash_after_loading: set[str] = set()  # ... right after it answered
        self.refuse_loading: dict[str, Exception] = {}  # models whose load raises
        self.load_gate: asyncio.Event | None = None  # loads wait for it when set
        self.lived = 0.0  # what uptime says: young unless a test makes it old
        self.spawns = 0
        self.log_levels: list[tuple[str, int | None]] = []  # ("init" or "set", level)
        self.controls: list[Any] = []  # the control messages received, in order

    @property
    def uptime(self) -> float:
        return self.lived

    async def _spawn(self) -> Any:
        self.spawns += 1
        self.channel = FakeChannel(self)
        return self.channel

    async def _reap(self, grace: float) -> str:
        return KILLED

    def die(self, unread: int = 0) -> None:
        """The process dies; it had not read the last ``unread`` requests sent to it."""
        self.channel.close(unread)

    def received(
        self, kind: type[messages.Command], instance_id: int, body: Any, future: asyncio.Future[Any]
    ) -> None:
        self.commands.append((kind, instance_id))
        if kind is messages.ApplyControl:
            message = body.message
            self.controls.append(message)
            if isinstance(message, SetLogLevel):
                self.log_levels.append(("set", message.level))
            future.set_result(None)
        elif kind is messages.Init:
            self.log_levels.append(("init", _kept_level(body.kept)))
            if self.failed_starts_to_come:
                self.failed_starts_to_come -= 1
                asyncio.get_running_loop().call_soon(self.die)
            else:
                future.set_result(4242)
        elif kind is messages.LoadInWorker:
            self.loading.append(asyncio.ensure_future(self._load(body.settings, future)))
        elif kind is messages.Unload:
            future.set_result(None)
        elif kind is messages.Predict:
            self.requests.append(future)

    async def _load(self, settings: ModelSettings, future: asyncio.Future[Any]) -> None:
        if self.load_gate is not None:
            await self.load_gate.wait()
        if settings.name in self.crash_loading:
            self.die()
        elif settings.name in self.refuse_loading:
            future.set_exception(self.refuse_loading[settings.name])
        else:
            future.set_result(LoadedInstance(ModelMetadata(name=settings.name)))
            if settings.name in self.crash_after_loading:
                self.die()

    def answer(self) -> None:
        """Answer the oldest request still waiting."""
        future = next(f for f in self.requests if not f.done())
        future.set_result(InferenceResponse([Tensor("y", np.ones(1))]))

    def loads_of(self, instance_id: int) -> int:
        return self.commands.count((messages.LoadInWorker, instance_id))


class RecordedSleep:
    """The pool's back-off sleep: records each delay; waits only while ``gate`` is shut."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await self.gate.wait()


class Pools:
    """Builds pools of fake workers and closes them after the test."""

    def __init__(self) -> None:
        self.sleep = RecordedSleep()
        self.opened: list[ProcessPool] = []

    async def start(
        self, workers: int, policy: RestartPolicy = DEFAULTS, stats: ModelStatsTable | None = None
    ) -> ProcessPool:
        settings = ServerSettings(parallel_workers=workers)
        pool = ProcessPool(
            settings, make_worker=FakeWorker, policy=policy, sleep=self.sleep, stats=stats
        )
        self.opened.append(pool)
        await pool.start()
        return pool

    async def close(self) -> None:
        self.sleep.gate.set()
        for pool in self.opened:
            await pool.close()


@pytest.fixture
async def pools() -> AsyncIterator[Pools]:
    made = Pools()
    yield made
    await made.close()


def model(name: str, **fields: Any) -> ModelSettings:
    return ModelSettings(name=name, implementation="fake.Model", **fields)


def fakes(pool: ProcessPool) -> list[FakeWorker]:
    return [worker for worker in pool.workers if isinstance(worker, FakeWorker)]


def restarted(worker: FakeWorker, times: int) -> Callable[[], bool]:
    """Whether the worker is back for the ``times``-th time, done reloading."""
    return lambda: worker.alive and worker.restarts == times and worker.next_to_reload() is None


async def test_instances_go_to_the_least_loaded_workers_and_requests_to_free_slots(
    pools: Pools,
) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a", workers=1, threads_per_worker=3))
    await pool.load(2, model("b", workers=1))
    await pool.load(3, model("c", threads_per_worker=2))
    assert (w0.loads_of(1), w1.loads_of(1), w0.loads_of(2), w1.loads_of(2)) == (1, 0, 0, 1)
    assert (pool.capacity(1), pool.capacity(2), pool.capacity(3)) == (3, 1, 4)

    sent = [pool.predict(Call(1, REQUEST)) for _ in range(3)]
    sent += [pool.predict(Call(3, REQUEST)), pool.predict(Call(3, REQUEST))]
    assert (len(w0.requests), len(w1.requests)) == (3, 2), "c goes to the less busy worker"
    sent.append(pool.predict(Call(3, REQUEST)))
    assert len(w0.requests) == 4, "the busier worker, as only it has a slot of c free"
    w1.answer()
    await asyncio.sleep(0)  # the answer's callback frees the slot
    sent.append(pool.predict(Call(3, REQUEST)))
    assert len(w1.requests) == 3, "a slot free again, on the less busy worker"
    for worker, answered in ((w0, 0), (w1, 1)):
        for _ in range(len(worker.requests) - answered):
            worker.answer()
    assert all([(await execution.result()).outputs for execution in sent])


async def test_a_dead_worker_fails_its_requests_and_comes_back_with_its_instances(
    pools: Pools,
) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    await pool.load(1, model("a", retry_on_worker_failure=False))
    await pool.load(2, model("b", workers=1))
    changes: list[int] = []
    pool.watch(1, lambda: changes.append(pool.capacity(1)))
    in_flight = pool.predict(Call(1, REQUEST))

    w0.die()
    with pytest.raises(WorkerLost, match=r"\(worker 0 \(pid None\)\) stopped before answering"):
        await in_flight.result()
    assert changes[0] == 1, "only worker 1 serves it while worker 0 restarts"
    with pytest.raises(WorkerLost, match="No worker process holding model 'b' is running"):
        pool.predict(Call(2, REQUEST))

    await wait_for_async(lambda: pool.capacity(2) == 1, "pool.capacity(2) == 1", timeout=5)
    assert changes == [1, 2] and w0.restarts == 1 and w0.spawns == 2
    assert (w0.loads_of(1), w0.loads_of(2)) == (2, 2), "both loaded again"
    served = pool.predict(Call(2, REQUEST))
    w0.answer()
    assert (await served.result()).outputs[0].name == "y"
    assert w1.restarts == 0


async def test_a_log_level_set_reaches_each_worker_now_and_when_it_restarts(
    pools: Pools,
) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    pool.control(SetLogLevel(logging.DEBUG))
    assert w0.log_levels == w1.log_levels == [("init", None), ("set", logging.DEBUG)]
    w0.die()
    pool.control(SetLogLevel(logging.WARNING))  # while it is down: its next start carries it
    await wait_for_async(restarted(w0, 1), "restarted(w0, 1)", timeout=5)
    assert w0.log_levels[2:] == [("init", logging.WARNING)]
    assert w1.log_levels[2:] == [("set", logging.WARNING)]


async def test_restarts_back_off_while_a_worker_dies_young_and_not_after_a_long_life(
    pools: Pools,
) -> None:
    policy = RestartPolicy(backoff=(0.0, 1.0, 2.0, 3.0), stable_after=30.0)
    pool = await pools.start(1, policy)
    (worker,) = fakes(pool)
    for deaths in (1, 2):
        worker.die()
        await wait_for_async(restarted(worker, deaths), "restarted(worker, deaths)", timeout=5)
    worker.failed_starts_to_come = 1  # a start that fails counts as dying young
    worker.die()
    await wait_for_async(restarted(worker, 3), "restarted(worker, 3)", timeout=5)
    assert pools.sleep.delays == [1.0, 2.0, 3.0, 3.0]
    assert worker.quick_deaths == 4

    worker.lived = 31.0
    worker.die()
    await wait_for_async(restarted(worker, 4), "restarted(worker, 4)", timeout=5)
    assert pools.sleep.delays[-1] == 0.0 and worker.quick_deaths == 0
    assert policy.delay(0) == 0.0 and policy.delay(99) == 3.0


async def test_an_instance_whose_reload_keeps_crashing_its_worker_is_dropped_and_reported(
    pools: Pools,
) -> None:
    pool = await pools.start(1, RestartPolicy(max_load_crashes=2))
    (worker,) = fakes(pool)
    failures: list[tuple[int, str]] = []
    pool.on_instance_failed(lambda instance_id, reason: failures.append((instance_id, reason)))
    await pool.load(1, model("a"))
    await pool.load(2, model("b"))

    worker.crash_loading = {"a"}
    worker.die()
    await wait_for_async(lambda: pool.capacity(2) == 1, "pool.capacity(2) == 1", timeout=5)
    assert worker.loads_of(1) == 1 + 2 and worker.restarts == 3
    reason = (
        f"Loading model 'a' failed: worker 0 (pid None) {KILLED} while loading it "
        "(2 times in a row, so it is no longer loaded there). Fix the model, then load it again."
    )
    assert failures == [(1, reason)]
    assert pool.capacity(1) == 0
    with pytest.raises(ModelNotReady, match=r"^Model 'a' is unavailable: Loading model 'a'"):
        pool.predict(Call(1, REQUEST))


async def test_a_holder_that_cannot_reload_is_dropped_while_another_worker_serves_on(
    pools: Pools,
) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    failures: list[tuple[int, str]] = []
    pool.on_instance_failed(lambda instance_id, reason: failures.append((instance_id, reason)))
    await pool.load(1, model("a", threads_per_worker=2))

    w0.refuse_loading = {"a": ModelError("the disk is gone")}
    w0.die()
    await wait_for_async(restarted(w0, 1), "restarted(w0, 1)", timeout=5)
    assert w0.loads_of(1) == 2 and pool.capacity(1) == 2 and failures == []
    # Two, so that neither is the suspect of w1's death (one alone is not retried).
    in_flight, in_flight_too = pool.predict(Call(1, REQUEST)), pool.predict(Call(1, REQUEST))
    assert len(w1.requests) == 2

    w1.refuse_loading = {"a": ModelError("the disk is gone")}
    w1.die()
    await wait_for_async(restarted(w1, 1), "restarted(w1, 1)", timeout=5)
    assert failures == [(1, "reloading it after its worker restarted failed: the disk is gone")], (
        "told once no worker holds it"
    )
    for execution in (in_flight, in_flight_too):
        with pytest.raises(ModelNotReady, match="Model 'a' is unavailable: reloading it"):
            await execution.result()  # it waited to be retried, in vain
    with pytest.raises(ModelNotReady, match="Model 'a' is unavailable: reloading it"):
        pool.predict(Call(1, REQUEST))


async def test_a_load_that_crashes_a_worker_fails_with_how_it_ended_and_leaves_nothing(
    pools: Pools,
) -> None:
    pool = await pools.start(2)
    w0, w1 = fakes(pool)
    w1.crash_loading = {"a"}
    message = f"Loading model 'a' failed: worker 1 (pid None) {KILLED} while loading it"
    with pytest.raises(WorkerLost, match=f"^{re.escape(message)}$"):
        await pool.load(1, model("a"))
    assert (messages.Unload, 1) in w0.commands, "unloaded from the worker that had loaded it"
    assert pool.capacity(1) == 0
    with pytest.raises(ModelNotReady, match="no longer loaded"):
        pool.predict(Call(1, REQUEST))
    await wait_for_async(restarted(w1, 1), "restarted(w1, 1)", timeout=5)
    assert w1.loads_of(1) == 1, "a failed load is not retried"


async def test_a_load_answered_just_before_its_worker_died_is_loaded_again(
    pools: Pools,
) -> None:
    pool = await pools.start(1)
    (worker,) = fakes(pool)
    worker.crash_after_loading = {"a"}
    pools.sleep.gate.clear()
    loaded = await pool.load(1, model("a"))
    assert loaded.metadata.name == "a" and pool.capacity(1) == 0
    worker.crash_after_loading = set()
    pools.sleep.gate.set()
    await wait_for_async(lambda: pool.capacity(1) == 1, "pool.capacity(1) == 1", timeout=5)
    assert worker.loads_of(1) == 2


async def test_an_instance_unloaded_while_it_reloads_is_unloaded_from_the_worker(
    pools: Pools,
) -> None:
    pool = await pools.start(1)
    (worker,) = fakes(pool)
    await pool.load(1, model("a"))
    worker.load_gate = asyncio.Event()
    worker.die()
    await wait_for_async(lambda: worker.loads_of(1) == 2, "worker.loads_of(1) == 2", timeout=5)
    await pool.unload(1)
    assert (messages.Unload, 1) not in worker.commands, "nothing loaded yet to unload"
    worker.load_gate.set()
    await wait_for_async(
        lambda: (messages.Unload, 1) in worker.commands,
        "(messages.Unload, 1) in worker.commands",
        timeout=5,
    )
    assert worker.slots(1) == 0 and worker.next_to_reload() is None


async def test_while_no_worker_runs_loads_and_requests_fail_and_closing_stops_the_restart(
    pools: Pools,
) -> None:
    pool = await pools.start(1)
    (worker,) = fakes(pool)
    await pool.load(1, model("a"))
    pools.sleep.gate.clear()  # the restart waits out its back-off
    worker.die()
    with pytest.raises(WorkerLost, match="Cannot load model 'b': no worker process is running"):
        await pool.load(2, model("b"))
    with pytest.raises(WorkerLost, match="No worker process holding model 'a' is running"):
        pool.predict(Call(1, REQUEST))

    await wait_for_async(
        lambda: len(pools.sleep.delays) == 1, "len(pools.sleep.delays) == 1", timeout=5
    )
    (restart,) = [task for task in asyncio.all_tasks() if task.get_name() == "restart-worker-0"]
    await pool.close()
    pools.sleep.gate.set()
    await asyncio.wait([restart])
    assert restart.cancelled() and worker.spawns == 1 and not worker.alive


async def test_a_worker_that_does_not_start_fails_the_pool_start(pools: Pools) -> None:
    def failing_second(*args: Any) -> FakeWorker:
        worker = FakeWorker(*args)
        worker.failed_starts_to_come = 1 if worker.index == 1 else 0
        return worker

    pool = ProcessPool(ServerSettings(parallel_workers=2), make_worker=failing_second)
    pools.opened.append(pool)
    message = f"Could not start the worker processes: Worker 1 did not start: it {KILLED}"
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        await pool.start()
    assert all(worker.channel.closed for worker in fakes(pool))


def _kept_level(kept: list[Any]) -> int | None:
    """The log level a worker's INIT carries among its kept control messages."""
    levels = [message.level for message in kept if isinstance(message, SetLogLevel)]
    assert len(kept) == len(levels) <= 1, kept
    return levels[0] if levels else None
