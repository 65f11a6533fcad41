"""One worker process as the main process sees it: start, call, notice death, stop.

:class:`Channel` is the main process's end of a worker's socket (see ipc.py for
what travels on it); :class:`WorkerProcess` owns the process and its channel.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, cast

from .. import custom_metrics
from ..errors import ModelError, WorkerLost
from ..settings import ServerSettings
from ..types import InferenceRequest, InferenceResponse
from . import ipc

logger = logging.getLogger(__name__)

# A worker imports numpy, pydantic and inferd's core before it answers; generous,
# because a loaded machine (or a cold disk) can make that slow.
START_TIMEOUT = 60.0
# How long a worker whose socket closed may take to exit before it is killed.
EXIT_GRACE = 2.0
EXIT_POLL_INTERVAL = 0.005


class Channel(asyncio.BufferedProtocol):
    """The main process's end of one worker's socket.

    Calls are multiplexed: each gets an id, its future is resolved when the reply
    with that id arrives, in whatever order the worker answers. When the socket
    closes (the worker exited or died), every call still waiting fails with
    WorkerLost and ``on_closed`` is called once.
    """

    def __init__(self, describe_loss: Callable[[], str], on_closed: Callable[[], None]) -> None:
        self._describe_loss = describe_loss
        self._on_closed = on_closed
        self._decoder = ipc.FrameDecoder()
        # Each call waiting for its reply: its future and what turns the reply into
        # the result (so a call's result is ready when its awaiter wakes up).
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[Any], Any] | None]] = {}
        self._call_ids = itertools.count()
        self._transport: asyncio.Transport | None = None
        self.closed = False

    @classmethod
    async def open(
        cls, sock: socket.socket, describe_loss: Callable[[], str], on_closed: Callable[[], None]
    ) -> Channel:
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(
            lambda: cls(describe_loss, on_closed), sock=sock
        )
        return channel

    def start_call(
        self, kind: int, instance_id: int, body: Any, decode: Callable[[Any], Any] | None = None
    ) -> asyncio.Future[Any]:
        """Send one command now; the future gets its result (through ``decode``, if
        given) or the worker's error. Raises WorkerLost if the channel is closed."""
        if self.closed or self._transport is None:
            raise WorkerLost(self._describe_loss())
        call_id = next(self._call_ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[call_id] = (future, decode)
        self._transport.writelines(ipc.encode((kind, call_id, instance_id, body)))
        return future

    async def call(self, kind: int, instance_id: int, body: Any) -> Any:
        """Send one command and wait for its reply (a result, or the worker's error)."""
        return await self.start_call(kind, instance_id, body)

    def close(self) -> None:
        """Close the socket; the worker sees end-of-file and exits."""
        if self._transport is not None:
            self._transport.close()

    # asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence no isinstance.
        self._transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            messages = self._decoder.buffer_updated(nbytes)
        except ipc.ProtocolError:
            logger.exception("Closing a worker's channel: it sent a message that cannot be read")
            self.close()
            return
        for kind, call_id, body in messages:
            if kind == ipc.METRICS:
                custom_metrics.deliver(body)
                continue
            future, decode = self._pending.pop(call_id, (None, None))
            if future is None or future.done():
                continue  # its caller gave up (cancelled)
            if kind != ipc.RESULT:
                future.set_exception(ipc.error_from_wire(body))
            elif decode is None:
                future.set_result(body)
            else:
                self._resolve(future, decode, body)

    def _resolve(
        self, future: asyncio.Future[Any], decode: Callable[[Any], Any], body: Any
    ) -> None:
        try:
            result = decode(body)
        except Exception as error:
            logger.exception("A worker's answer cannot be read")
            future.set_exception(ModelError(f"The worker's answer cannot be read: {error}"))
        else:
            future.set_result(result)

    def eof_received(self) -> bool:
        return False  # close our end too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(WorkerLost(self._describe_loss()))
        self._on_closed()


class WorkerProcess:
    """A worker process, its channel and the bookkeeping the pool dispatches on."""

    def __init__(
        self,
        index: int,
        settings: ServerSettings,
        on_death: Callable[[WorkerProcess], None],
    ) -> None:
        self.index = index
        self._settings = settings
        self._on_death = on_death
        self._process: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None
        self._exit: asyncio.Task[str] | None = None
        self.alive = False
        self.started_at = 0.0
        # Instances loaded and serving here; requests in flight, per instance and in all.
        self.loaded: set[int] = set()
        self.busy: dict[int, int] = {}
        self.outstanding = 0
        # Instances to load again after a restart, in the order they were loaded.
        self.to_reload: list[int] = []
        # Metrics: time with requests in flight (up to _busy_since), restarts so far.
        self._busy_total = 0.0
        self._busy_since = 0.0
        self.restarts = 0
        # One load at a time per worker, so peak memory stays one model's worth.
        self.load_lock = asyncio.Lock()
        self.quick_deaths = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def label(self) -> str:
        return f"worker {self.index} (pid {self.pid})"

    async def start(self) -> None:
        """Spawn the process and wait until it has set itself up."""
        ours, theirs = socket.socketpair()
        command = [
            sys.executable, "-m", "inferd.workers.worker", str(theirs.fileno()), str(os.getpid())
        ]  # fmt: skip
        begun = time.monotonic()
        try:
            self._process = subprocess.Popen(
                command, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self._exit = None
        self._channel = await Channel.open(ours, self._describe_loss, self._channel_closed)
        init = (self.index, list(sys.path), self._settings)
        try:
            await asyncio.wait_for(self._channel.call(ipc.INIT, 0, init), START_TIMEOUT)
        except (WorkerLost, TimeoutError):
            self._channel.close()
            status = await self.exit_status()
            raise WorkerLost(f"Worker {self.index} did not start: it {status}") from None
        self.alive = True
        self.started_at = time.monotonic()
        logger.info("Started %s in %.2fs", self.label, self.started_at - begun)

    async def call(self, kind: int, instance_id: int, body: Any) -> Any:
        if self._channel is None:
            raise WorkerLost(self._describe_loss())
        return await self._channel.call(kind, instance_id, body)

    def predict(
        self, instance_id: int, request: InferenceRequest
    ) -> asyncio.Future[InferenceResponse]:
        """Send the request now; the future gets the response."""
        assert self._channel is not None  # only live workers are picked
        future = self._channel.start_call(
            ipc.PREDICT, instance_id, ipc.pack_request(request), ipc.unpack_response
        )
        if not self.outstanding:
            self._busy_since = time.perf_counter()
        self.outstanding += 1
        self.busy[instance_id] = self.busy.get(instance_id, 0) + 1
        future.add_done_callback(lambda _: self._finished(instance_id))
        return future

    def _finished(self, instance_id: int) -> None:
        self.outstanding -= 1
        self.busy[instance_id] -= 1
        if not self.outstanding:
            self._busy_total += time.perf_counter() - self._busy_since

    @property
    def busy_seconds(self) -> float:
        """Time this worker had at least one request in flight, since the server started."""
        if self.outstanding:
            return self._busy_total + time.perf_counter() - self._busy_since
        return self._busy_total

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
            self._exit = asyncio.ensure_future(self._reap(grace))
        return self._exit

    def _describe_loss(self) -> str:
        return (
            f"The worker process running this request ({self.label}) stopped before "
            "answering; it is being restarted. Retry the request."
        )

    def _channel_closed(self) -> None:
        was_alive, self.alive = self.alive, False
        self.exit_status()
        if was_alive:  # a worker that dies while starting is start()'s to report
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
