"""The in-process pool (``parallel_workers: 0``): runtimes run in the main process.

It has the same interface as the process pool, so the scheduler does not care
where a model runs. Model code never holds the event loop, which reads every
connection of the process and answers its health probes (a protocol process
runs its copied models here):

- a synchronous ``predict`` runs in a thread of the model's own until its calls
  are measured quick (a moving average under ``SLOW_CALL_SECONDS``), and from then
  on right on the event loop: for a fast model (the common case) a thread hop
  costs more than the prediction. One whose calls grow slow again goes back to
  its thread. Its first call, whose cost is not known, never runs on the loop;
- a synchronous ``predict_stream`` (a plain generator) runs in a thread of the
  model's own for the stream's life, each response handed to the loop as it is
  made (:mod:`inferd.workers.thread_stream`); an async generator is stepped on
  the loop (:mod:`inferd.workers.local_stream`);
- with ``threads_per_worker`` above 1, a synchronous ``predict`` runs in that many
  threads of its own (for models that wait on I/O or a GPU), and an async one
  that many at a time. An ``async def`` runs on the loop: it is its author's to
  await rather than block.

A call here cannot be stopped (there is no process to kill), so a model with an
``inference_timeout`` is refused (:func:`refuse_unstoppable`): at start-up, and
when it is loaded through the repository API.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable

from inferd.errors import ConfigurationError, ModelNotReady
from inferd.model import WorkerContext
from inferd.observability.trace_record import BatchRun
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers import preloaded
from inferd.workers.base import (
    Answer,
    Call,
    Control,
    Execution,
    Holder,
    LoadedInstance,
    ResponseStream,
)
from inferd.workers.environments import refuse_in_process_environment
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.local_stream import LocalStream
from inferd.workers.thread_stream import ThreadStream

# The one holder of every instance here (sequences).
IN_PROCESS: Holder = (-1, 1)

# A plain predict whose recent calls average longer than this runs off the event loop
# (far above a thread hop's cost, ~50 us; far below what stalls a health probe). One
# whose calls are not measured yet runs off it too.
SLOW_CALL_SECONDS = 0.005
# Weight of the newest call in the moving average: a slow first call (a cold cache)
# moves a light model off the loop for a few calls only.
_NEWEST_WEIGHT = 0.2


class InProcessPool:
    """Holds loaded runtimes by instance id and calls them directly."""

    def __init__(self) -> None:
        self._models: dict[int, LoadedModel] = {}

    async def start(self) -> None:
        """Nothing to start: runtimes are loaded on demand."""

    async def close(self) -> None:
        for instance_id in list(self._models):
            await self.unload(instance_id)

    async def load(self, instance_id: int, settings: ModelSettings) -> LoadedInstance:
        refuse_unstoppable(settings)
        refuse_in_process_environment(settings)
        device = settings.devices[0] if settings.devices else None
        model = preloaded.take(settings)  # loaded before this process was forked
        if model is not None:
            model.context = WorkerContext(device=device)
            loaded = await LoadedModel.adopt(model)
        else:
            loaded = await LoadedModel.load(settings, WorkerContext(device=device))
        self._models[instance_id] = loaded
        return loaded.instance()

    async def unload(self, instance_id: int) -> None:
        loaded = self._models.pop(instance_id, None)
        if loaded is not None:
            await loaded.release()

    def predict(self, call: Call) -> Execution:
        loaded = self._loaded(call.instance_id)
        request = call.request
        if loaded.is_async:
            answer = loaded.call_async(request)
        elif loaded.threads is None:
            answer = _timed_call(loaded, request)
        else:
            answer = _in_a_thread(loaded, request)
        return Execution.inline(answer if call.run is None else _timed(answer, call.run))

    def stream(self, call: Call) -> ResponseStream:
        loaded = self._loaded(call.instance_id)
        if loaded.interleaved_streams:  # an async generator: on the loop
            return LocalStream(loaded, call.request)
        # A plain generator runs in a thread of the model's own: its time.sleep or
        # compute between yields would hold the loop (measured: five events 0.3 s apart
        # all arrived at 1.5 s, and a health probe waited 5.8 s behind two such streams).
        return ThreadStream(loaded, call.request, loaded.own_threads())

    def control(self, message: Control) -> None:
        """Applied here at once, whatever its destination: this process is the one
        holder of every instance, and the only process running runtimes."""
        message.apply_in_worker(self)

    def loaded(self, instance_id: int) -> LoadedModel | None:
        """What a control message reaches (base.WorkerState)."""
        return self._models.get(instance_id)

    def holders(self, instance_id: int) -> list[Holder]:
        """One holder, this process (sequences)."""
        return [IN_PROCESS] if instance_id in self._models else []

    def _loaded(self, instance_id: int) -> LoadedModel:
        loaded = self._models.get(instance_id)
        if loaded is None:
            raise ModelNotReady("This model version is no longer loaded; retry the request")
        return loaded

    def capacity(self, instance_id: int) -> int:
        loaded = self._models.get(instance_id)
        return loaded.capacity if loaded is not None else 0

    def restarting(self, instance_id: int) -> bool:
        return False  # nothing here restarts: 0 is an unloaded instance

    def watch(self, instance_id: int, on_change: Callable[[], None]) -> None:
        """Capacity here is fixed at load time: there is nothing to report."""

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        """Runtimes in the main process never fail on their own: nothing to report."""


def refuse_unstoppable(settings: ModelSettings) -> None:
    """ConfigurationError if the model asks for what needs a worker process."""
    if settings.inference_timeout:
        where = f"{settings.source}: " if settings.source else ""
        raise ConfigurationError(
            f"{where}{settings.label} sets inference_timeout ({settings.inference_timeout:g}s), "
            "which needs worker processes: with parallel_workers: 0 the model runs in the "
            "server's own process, where a call that runs too long cannot be stopped. Set "
            "parallel_workers to 1 or more, or remove inference_timeout (from "
            "model-settings.json, or the INFERD_MODEL_INFERENCE_TIMEOUT environment variable)."
        )


async def _timed(answer: Answer, run: BatchRun) -> InferenceResponse:
    """``answer``, noting in ``run`` when it ran (a traced request's predict)."""
    started = time.time_ns()
    try:
        return await answer
    finally:
        run.predicted(None, started, time.time_ns())


async def _timed_call(loaded: LoadedModel, request: InferenceRequest) -> InferenceResponse:
    """A plain predict with ``threads_per_worker: 1``: on the loop once its calls are
    measured quick, else (its first calls, or slow ones) in its own thread."""
    recent = loaded.recent_call_seconds
    if recent is not None and recent <= SLOW_CALL_SECONDS:
        return _measured_call(loaded, request)
    run = contextvars.copy_context().run  # the request's context goes along
    loop = asyncio.get_running_loop()
    off_loop = loaded.own_threads()  # one thread of its own
    return await loop.run_in_executor(off_loop, run, _measured_call, loaded, request)


def _measured_call(loaded: LoadedModel, request: InferenceRequest) -> InferenceResponse:
    """The call, its own time (not a thread hop's) noted in the model's moving average."""
    started = time.perf_counter()
    try:
        return loaded.call_sync(request)
    finally:
        took = time.perf_counter() - started
        recent = loaded.recent_call_seconds
        loaded.recent_call_seconds = (
            took if recent is None else recent + _NEWEST_WEIGHT * (took - recent)
        )


async def _in_a_thread(loaded: LoadedModel, request: InferenceRequest) -> InferenceResponse:
    assert loaded.threads is not None
    run = contextvars.copy_context().run  # the request's context goes along into the thread
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(loaded.threads, run, loaded.call_sync, request)
