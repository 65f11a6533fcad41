"""One worker process as the main process sees it: start, command, notice death, stop.

It also keeps the books the pool dispatches on (which instances it serves and
with how many slots, its requests in flight, its open streams, the instances to
load again after a restart, how often in a row it died young). A stream of a
plain generator counts as a request in flight (a busy slot) until it has
finished; an interleaved one (async generator) holds no slot and counts among
the open streams instead. The pool reads and updates them
through methods only, so each rule about them lives here once.

The process itself is reached through two methods, :meth:`WorkerProcess._spawn`
and :meth:`WorkerProcess._reap`; tests replace just those (and ``uptime``, to
play a long life) to run the pool's logic on fake workers, without processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from inferd.errors import WorkerLost
from inferd.observability.trace_record import BatchRun
from inferd.settings import ModelSettings, ServerSettings
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers import ipc
from inferd.workers.base import LoadedInstance
from inferd.workers.channel import Channel
from inferd.workers.environments import WorkerEnvironment
from inferd.workers.process_handle import ProcessHandle
from inferd.workers.remote_stream import RemoteStream

logger = logging.getLogger(__name__)

# A worker imports numpy, pydantic and inferd's core before it answers; generous,
# because a loaded machine (or a cold disk) can make that slow.
START_TIMEOUT = 60.0
# How long a worker whose socket closed may take to exit before it is killed.
EXIT_GRACE = 2.0
EXIT_POLL_INTERVAL = 0.005


class WorkerProcess:
    """A worker process, its channel and the bookkeeping the pool dispatches on."""

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
        # Instances loaded and serving here, each with its slots (threads_per_worker).
        self._slots: dict[int, int] = {}
        # Requests in flight, per instance and in all.
        self._busy: dict[int, int] = {}
        self._outstanding = 0
        # Interleaved streams running, of all its instances.
        self._open_streams = 0
        # Instances to load again after a restart, in the order they were loaded.
        self._to_reload: list[int] = []
        self._quick_deaths = 0
        # Why the server killed the process, if it did (a call ran past its time).
        self._kill_reason = ""
        # Metrics: time with requests in flight (up to _busy_since).
        self._busy_total = 0.0
        self._busy_since = 0.0
        # One load at a time per worker, so peak memory stays one model's worth.
        self._load_lock = asyncio.Lock()
        # The root logger's level set at run time (None: as the settings say); a
        # (re)started process gets it at INIT.
        self._log_level: int | None = None

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
        return self._outstanding

    @property
    def open_streams(self) -> int:
        """Interleaved streams (which hold no slot) started here and not finished."""
        return self._open_streams

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
        init: ipc.InitBody = (self.index, import_path, self._settings, self._log_level)
        try:
            await asyncio.wait_for(channel.call(ipc.INIT, 0, init), START_TIMEOUT)
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
        ours, theirs = socket.socketpair()
        environment = self.environment
        python = sys.executable if environment is None else environment.python
        command = [
            python, "-m", "inferd.workers.worker", str(theirs.fileno()), str(os.getpid())
        ]  # fmt: skip
        variables = None if environment is None else environment.process_environment()
        try:
            self._process = subprocess.Popen(
                command, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=variables
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        return await Channel.open(
            ours, self._describe_loss, self._channel_closed, self._describe_stream_loss
        )

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
            self._to_reload += [i for i in self._slots if i not in self._to_reload]
            self._slots.clear()
            self._on_death(self)

    async def _reap(self, grace: float) -> str:
        process = self._process
        assert process is not None
        deadline = time.monotonic() + grace
        while process.poll() is None:
            if time.monotonic() > deadline:
                logger.warning("%s did not exit %.0fs after its socket closed; killing it",
                               self.label, grace)  # fmt: skip
                process.kill()
                deadline = float("inf")
            await asyncio.sleep(EXIT_POLL_INTERVAL)
        return describe_exit(process.returncode)

    # Instances

    async def load(
        self, instance_id: int, settings: ModelSettings, device: str | None
    ) -> LoadedInstance:
        """Load an instance here, one load at a time; WorkerLost saying how the process
        ended if it died while loading."""
        async with self._load_lock:
            try:
                body: ipc.LoadBody = (settings, device)
                loaded: LoadedInstance = await self._call(ipc.LOAD, instance_id, body)
            except WorkerLost:
                status = await self.exit_status()
                raise WorkerLost(
                    f"Loading model {settings.name!r} failed: {self.label} {status} while "
                    "loading it"
                ) from None
        if self._alive:
            self._slots[instance_id] = settings.threads_per_worker
            self.cancel_reload(instance_id)
        elif instance_id not in self._to_reload:  # it died right after answering
            self._to_reload.append(instance_id)
        return loaded

    async def unload(self, instance_id: int) -> None:
        """Unload an instance it serves; one it does not serve is ignored."""
        if self._slots.pop(instance_id, None) is None:
            return
        with contextlib.suppress(WorkerLost):  # a dead worker holds nothing
            await self._call(ipc.UNLOAD, instance_id, None)

    def serves(self, instance_id: int) -> bool:
        """Whether requests for the instance may be sent here now."""
        return self._alive and instance_id in self._slots

    def slots(self, instance_id: int) -> int:
        """How many requests of the instance it may run at once (0 unless it serves it)."""
        return self._slots.get(instance_id, 0) if self._alive else 0

    def free_slots(self, instance_id: int) -> int:
        return self.slots(instance_id) - self._busy.get(instance_id, 0)

    def next_to_reload(self) -> int | None:
        """The instance to load again first now that it restarted, if any is left."""
        return self._to_reload[0] if self._to_reload else None

    def cancel_reload(self, instance_id: int) -> None:
        """Load the instance here no more after a restart (gone, or it keeps failing)."""
        with contextlib.suppress(ValueError):
            self._to_reload.remove(instance_id)

    # Requests

    def predict(
        self,
        instance_id: int,
        request: InferenceRequest,
        then: Callable[[asyncio.Future[InferenceResponse]], None] | None = None,
        run: BatchRun | None = None,
    ) -> asyncio.Future[InferenceResponse]:
        """Send the request now; the future gets the response. ``then(future)`` is
        called once it is done, right after the books here are (in the same callback:
        a caller following its requests costs no extra turn of the event loop). With
        ``run`` (a traced request), the worker says when its predict ran, noted there."""
        packed = ipc.pack_request(request)
        if run is None:
            future: asyncio.Future[InferenceResponse] = self._call(
                ipc.PREDICT, instance_id, packed, ipc.unpack_response
            )
        else:
            timed = functools.partial(_unpack_timed, run, self.index)
            future = self._call(ipc.PREDICT_TIMED, instance_id, packed, timed)
        self._started(instance_id)
        if then is None:
            future.add_done_callback(lambda _: self._finished(instance_id))
        else:

            def finished(done: asyncio.Future[InferenceResponse]) -> None:
                self._finished(instance_id)
                then(done)

            future.add_done_callback(finished)
        return future

    def stream(
        self, instance_id: int, request: InferenceRequest, *, holds_slot: bool
    ) -> RemoteStream:
        """Start ``predict_stream`` here now; its responses as they come. A stream that
        ``holds_slot`` (a plain generator's) is busy work here until it has finished."""
        if self._channel is None:
            raise WorkerLost(self._describe_stream_loss())
        stream = self._channel.open_stream(instance_id, request)
        if holds_slot:
            self._started(instance_id)
            stream.finished.add_done_callback(lambda _: self._finished(instance_id))
        else:
            self._open_streams += 1
            stream.finished.add_done_callback(self._stream_closed)
        return stream

    def end_sequence(self, instance_id: int, sequence_id: int | str) -> None:
        """Have the runtime drop a sequence's state (its ``sequence_end``), after the
        commands sent before; a process that died meanwhile took the state with it."""
        unheard = functools.partial(_unheard, "sequence_end")
        self._call(ipc.SEQUENCE_END, instance_id, sequence_id).add_done_callback(unheard)

    def set_log_level(self, level: int) -> None:
        """Set the process's root logger level now, and at each later start."""
        self._log_level = level
        if self._channel is None:  # not started yet: INIT carries it
            return
        with contextlib.suppress(WorkerLost):  # dead: its restart's INIT carries it
            unheard = functools.partial(_unheard, "log level change")
            self._channel.start_call(ipc.LOG_LEVEL, 0, level).add_done_callback(unheard)

    def _stream_closed(self, _: asyncio.Future[None]) -> None:
        self._open_streams -= 1

    def _started(self, instance_id: int) -> None:
        if not self._outstanding:
            self._busy_since = time.perf_counter()
        self._outstanding += 1
        self._busy[instance_id] = self._busy.get(instance_id, 0) + 1

    def _finished(self, instance_id: int) -> None:
        self._outstanding -= 1
        self._busy[instance_id] -= 1
        if not self._outstanding:
            self._busy_total += time.perf_counter() - self._busy_since

    @property
    def busy_seconds(self) -> float:
        """Time this worker had at least one request in flight, since the server started."""
        if self._outstanding:
            return self._busy_total + time.perf_counter() - self._busy_since
        return self._busy_total

    def _call(
        self, kind: int, instance_id: int, body: Any, decode: Callable[[Any], Any] | None = None
    ) -> asyncio.Future[Any]:
        if self._channel is None:
            raise WorkerLost(self._describe_loss())
        return self._channel.start_call(kind, instance_id, body, decode)


def _unpack_timed(run: BatchRun, worker: int, timed: ipc.TimedResponse) -> InferenceResponse:
    packed, started_ns, ended_ns = timed
    run.predicted(worker, started_ns, ended_ns)
    return ipc.unpack_response(packed)


def _unheard(what: str, done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        logger.debug("A %s did not reach its worker: %s", what, done.exception())


def describe_exit(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    if name == "SIGKILL":
        return "was killed by SIGKILL (by someone, or by the out-of-memory killer)"
    return f"was killed by {name}"
