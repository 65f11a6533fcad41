"""One worker process as the main process sees it: start, command, notice death, stop.

The process is started and reaped by :mod:`inferd.workers.spawn`, reached
through its :class:`~inferd.workers.channel.Channel`. Beside it sit its books:
the :class:`~inferd.workers.slot_book.SlotBook` the pool dispatches on (slots,
requests in flight, the instances to load again after a restart) and its
:class:`~inferd.workers.worker_metrics.WorkerMetrics` (busy time, open
interleaved streams). A stream of a plain generator counts as a request in
flight until it has finished; an interleaved one holds no slot and counts among
the open streams instead. The pool reads them through this class only.

The process itself is reached through two methods, :meth:`WorkerProcess._spawn`
and :meth:`WorkerProcess._reap`; tests replace just those (and ``uptime``, to
play a long life) to run the pool's logic on fake workers, without processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from inferd.errors import WorkerLost
from inferd.observability.trace_record import BatchRun
from inferd.settings import ModelSettings, ServerSettings
from inferd.types import InferenceResponse
from inferd.workers import ipc, messages, spawn
from inferd.workers.base import Call, Control, LoadedInstance
from inferd.workers.channel import Channel
from inferd.workers.environments import WorkerEnvironment
from inferd.workers.process_handle import ProcessHandle
from inferd.workers.remote_stream import RemoteStream
from inferd.workers.slot_book import SlotBook
from inferd.workers.worker_metrics import WorkerMetrics

logger = logging.getLogger(__name__)

# A worker imports numpy, pydantic and inferd's core before it answers; generous,
# because a loaded machine (or a cold disk) can make that slow.
START_TIMEOUT = 60.0
# How long a worker whose socket closed may take to exit before it is killed.
EXIT_GRACE = 2.0


class WorkerProcess:
    """A worker process, its channel, and its books (slots, metrics)."""

    def __init__(
        self,
        index: int,
        settings: ServerSettings,
        on_death: Callable[[WorkerProcess], None],
        environment: WorkerEnvironment | None = None,
    ) -> None:
        self.index = index
        # A model's own Python environment to run in (None: the server's).
        self.environment = environment
        self._settings = settings
        self._on_death = on_death
        self._process: ProcessHandle | None = None  # a Popen, or a forked worker's handle
        self._channel: Channel | None = None
        self._exit: asyncio.Task[str] | None = None
        self._alive = False
        self._started_at = 0.0
        self._starts = 0
        self._quick_deaths = 0
        # Why the server killed the process, if it did (a call ran past its time).
        self._kill_reason = ""
        # One load at a time per worker, so peak memory stays one model's worth.
        self._load_lock = asyncio.Lock()
        # The latest control message of each type sent to every process (a log level
        # set at run time): a (re)started process gets them in its Init.
        self._kept: dict[type, Control] = {}
        self.book = SlotBook()
        self.metrics = WorkerMetrics()
        # Requests running here (busy slots and open streams) when it last died: one
        # alone is the suspect of its death (retry.py).
        self.running_at_death = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def label(self) -> str:
        return f"worker {self.index} (pid {self.pid})"

    @property
    def alive(self) -> bool:
        """Started and not (yet) seen to die."""
        return self._alive

    @property
    def uptime(self) -> float:
        """Seconds since it last started."""
        return time.monotonic() - self._started_at

    @property
    def restarts(self) -> int:
        """Times it was started again after dying."""
        return max(self._starts - 1, 0)

    @property
    def starts(self) -> int:
        """Times it has started: with its index, which process it is (sequences)."""
        return self._starts

    @property
    def quick_deaths(self) -> int:
        """Times in a row it died young (or failed to start)."""
        return self._quick_deaths

    @property
    def kill_reason(self) -> str:
        """Why the server killed this process since it last started ("": it did not)."""
        return self._kill_reason

    @property
    def outstanding(self) -> int:
        """Requests sent to it and not answered yet."""
        return self.book.outstanding

    @property
    def open_streams(self) -> int:
        """Interleaved streams (which hold no slot) started here and not finished."""
        return self.metrics.open_streams

    @property
    def busy_seconds(self) -> float:
        """Time this worker had at least one request in flight, since the server started."""
        return self.metrics.busy_seconds

    # Lifetime

    async def start(self) -> None:
        """Spawn the process and wait until it has set itself up; WorkerLost if it
        dies or hangs first (OSError if it cannot be spawned)."""
        begun = time.monotonic()
        self._exit = None
        self._kill_reason = ""
        self._channel = channel = await self._spawn()
        # A worker in a model's environment keeps that environment's import path.
        import_path = list(sys.path) if self.environment is None else []
        kept = list(self._kept.values())
        init = messages.Init(self.index, import_path, self._settings, kept)
        try:
            await asyncio.wait_for(channel.call(init), START_TIMEOUT)
        except (WorkerLost, TimeoutError):
            channel.close()
            status = await self.exit_status()
            raise WorkerLost(f"Worker {self.index} did not start: it {status}") from None
        self._alive = True
        self._started_at = time.monotonic()
        self._starts += 1
        logger.info("Started %s in %.2fs", self.label, self._started_at - begun)

    async def _spawn(self) -> Channel:
        """Start the process; the channel to it (not yet initialized)."""
        self._process, ours = spawn.spawn(self.environment)
        return await Channel.open(
            ours,
            self._describe_loss,
            self._channel_closed,
            self._describe_stream_loss,
            reads_acknowledged=True,
        )

    async def _reap(self, grace: float) -> str:
        assert self._process is not None
        return await spawn.reap(self._process, grace, self.label)

    async def stop(self, timeout: float) -> None:
        """Close the channel (the worker exits on end-of-file); kill it after ``timeout``."""
        if self._channel is not None:
            self._channel.close()
        if self._process is not None:
            await self.exit_status(timeout)

    def exit_status(self, grace: float = EXIT_GRACE) -> asyncio.Task[str]:
        """How the process ended ("was killed by SIGSEGV"), once it has; it is killed
        if it is still running ``grace`` seconds after its socket closed."""
        if self._exit is None:
            self._exit = asyncio.ensure_future(self._ended(grace))
        return self._exit

    async def _ended(self, grace: float) -> str:
        status = await self._reap(grace)
        return f"was killed by the server: {self._kill_reason}" if self._kill_reason else status

    def record_death(self, *, young: bool) -> None:
        """Count one more death in a row if it died young (a failed start counts too);
        a worker that lived long enough starts the count afresh."""
        self._quick_deaths = self._quick_deaths + 1 if young else 0

    def kill(self, reason: str) -> None:
        """Kill the process now, because ``reason``; its death is noticed at once, as
        any other (its calls fail, it is restarted), and described with the reason."""
        if not self._alive:
            return
        self._kill_reason = reason
        logger.error("Killing %s: %s", self.label, reason)
        if self._process is not None:
            self._process.kill()
        if self._channel is not None:
            self._channel.abort()

    def _describe_loss(self) -> str:
        return (
            f"The worker process running this request ({self.label}) stopped before "
            f"answering{self._why_stopped()}; it is being restarted. Retry the request."
        )

    def _describe_stream_loss(self) -> str:
        return (
            f"The worker process running this stream ({self.label}) stopped"
            f"{self._why_stopped()}; it is being restarted. A stream cannot be resumed: "
            "start it again."
        )

    def _why_stopped(self) -> str:
        return f" (the server killed it: {self._kill_reason})" if self._kill_reason else ""

    def _channel_closed(self) -> None:
        was_alive, self._alive = self._alive, False
        self.exit_status()
        if was_alive:  # a worker that dies while starting is start()'s to report
            # Counted before the failed calls' callbacks run (they run on a later
            # turn of the loop): what was running as it died, that is what it had
            # read (a request sent after it died, before that was noticed, was not).
            running = self.book.outstanding + self.metrics.open_streams
            unread = self._channel.unread_work if self._channel is not None else 0
            self.running_at_death = running - unread
            self.book.lost_all()
            self._on_death(self)

    # Instances

    async def load(
        self, instance_id: int, settings: ModelSettings, device: str | None
    ) -> LoadedInstance:
        """Load an instance here, one load at a time; WorkerLost saying how the process
        ended if it died while loading."""
        async with self._load_lock:
            try:
                load = messages.LoadInWorker(settings, device)
                loaded: LoadedInstance = await self._call(load, instance_id)
            except WorkerLost:
                status = await self.exit_status()
                raise WorkerLost(
                    f"Loading model {settings.name!r} failed: {self.label} {status} while "
                    "loading it"
                ) from None
        if self._alive:
            self.book.serving(instance_id, settings.threads_per_worker)
        else:  # it died right after answering
            self.book.reload_later(instance_id)
        return loaded

    async def unload(self, instance_id: int) -> None:
        """Unload an instance it serves; one it does not serve is ignored."""
        if not self.book.forget(instance_id):
            return
        with contextlib.suppress(WorkerLost):  # a dead worker holds nothing
            await self._call(messages.Unload(), instance_id)

    def serves(self, instance_id: int) -> bool:
        """Whether requests for the instance may be sent here now."""
        return self._alive and instance_id in self.book.serving_slots

    def slots(self, instance_id: int) -> int:
        """How many requests of the instance it may run at once (0 unless it serves it)."""
        return self.book.slots(instance_id) if self._alive else 0

    def free_slots(self, instance_id: int) -> int:
        return self.book.free_slots(instance_id)

    def next_to_reload(self) -> int | None:
        """The instance to load again first now that it restarted, if any is left."""
        return self.book.next_to_reload()

    def cancel_reload(self, instance_id: int) -> None:
        """Load the instance here no more after a restart (gone, or it keeps failing)."""
        self.book.cancel_reload(instance_id)

    # Calls

    def predict(
        self,
        call: Call,
        then: Callable[[asyncio.Future[InferenceResponse]], None] | None = None,
    ) -> asyncio.Future[InferenceResponse]:
        """Send the call now; the future gets the response. ``then(future)`` is called
        once it is done, right after the books here are (in the same callback: a
        caller following its calls costs no extra turn of the event loop). A traced
        call's worker says when its predict ran, noted in ``call.run``."""
        instance_id = call.instance_id
        packed = ipc.pack_request(call.request)
        run = call.run
        if run is None:
            future: asyncio.Future[InferenceResponse] = self._call(
                messages.Predict(packed), instance_id, ipc.unpack_response
            )
        else:
            timed = functools.partial(_unpack_timed, run, self.index)
            future = self._call(messages.PredictTimed(packed), instance_id, timed)
        self._started(instance_id)
        if then is None:
            future.add_done_callback(lambda _: self._finished(instance_id))
        else:

            def finished(done: asyncio.Future[InferenceResponse]) -> None:
                self._finished(instance_id)
                then(done)

            future.add_done_callback(finished)
        return future

    def stream(self, call: Call, *, holds_slot: bool) -> RemoteStream:
        """Start ``predict_stream`` here now; its responses as they come. A stream that
        ``holds_slot`` (a plain generator's) is busy work here until it has finished."""
        if self._channel is None:
            raise WorkerLost(self._describe_stream_loss())
        instance_id = call.instance_id
        stream = self._channel.open_stream(instance_id, call.request)
        if holds_slot:
            self._started(instance_id)
            stream.finished.add_done_callback(lambda _: self._finished(instance_id))
        else:
            self.metrics.stream_opened()
            stream.finished.add_done_callback(self.metrics.stream_closed)
        return stream

    def control(self, message: Control) -> None:
        """Tell the process ``message`` after the commands sent before it. One for every
        process is kept for its later starts too; one for a holder reaching a process
        that died meanwhile is moot (the holder's state went with it)."""
        if message.destination() is None:
            self._kept[type(message)] = message
            if self._channel is None:  # not started yet: Init carries it
                return
        try:
            sent = self._call(messages.ApplyControl(message))
        except WorkerLost:  # dead: its restart's Init carries what is kept
            return
        sent.add_done_callback(functools.partial(_unheard, type(message).__name__))

    def _started(self, instance_id: int) -> None:
        if self.book.started(instance_id):
            self.metrics.busy_from_now()

    def _finished(self, instance_id: int) -> None:
        if self.book.finished(instance_id):
            self.metrics.idle_from_now()

    def cancel(self, running: asyncio.Future[InferenceResponse]) -> None:
        """Ask the worker to cancel a call :meth:`predict` sent (its client left); it
        still answers, which frees the slot."""
        if self._channel is not None:
            self._channel.ask_to_cancel(running)

    def _call(
        self,
        command: messages.Command,
        instance_id: int = 0,
        decode: Callable[[Any], Any] | None = None,
    ) -> asyncio.Future[Any]:
        if self._channel is None:
            raise WorkerLost(self._describe_loss())
        return self._channel.start_call(command, instance_id, decode)


def _unpack_timed(run: BatchRun, worker: int, timed: messages.WorkerTimed) -> InferenceResponse:
    packed, started_ns, ended_ns = timed
    run.predicted(worker, started_ns, ended_ns)
    return ipc.unpack_response(packed)


def _unheard(what: str, done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        logger.debug("A %s did not reach its worker: %s", what, done.exception())
