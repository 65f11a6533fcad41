"""Models the model host runs, as a protocol process reaches them: a Pool over one socket.

With several protocol processes, a model that cannot be copied into each of them
(supervisor/placement.py: a GPU, adaptive batching, sequences, its own worker
processes) is loaded once, in the model host, a server of its own with no public
port (docs/design.md "The model host"). A protocol process still takes such a
model's requests off the wire and decodes them; this pool sends each, decoded, to
the host over ``host.sock`` and hands back its answer. The host runs it through
its own dataplane: one queue and one batcher for every process's requests, one
holder for a sequence's, whichever process took them.

The socket carries the worker IPC (``messages.py``, through the same
:class:`Channel` as a worker's): ``BindHosted`` binds an instance id of this
process to the host's version of that name, ``Predict`` / ``PredictTraced`` /
``Stream`` run a request there. A protocol process does not queue these requests itself
(the registry gives their versions no batching, sequence or cache of their own,
and this pool lends them :data:`HOSTED_SLOTS` slots): the host's queue, batcher
and limits are the model's.

When the host dies, what it was running fails (WorkerLost: 503), the supervisor
starts it again, and the next call here connects again and binds every instance
anew; while the host is down a call fails with ModelNotReady (503) at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from inferd.context import Disconnected
from inferd.errors import ModelNotReady, WorkerLost
from inferd.observability.trace_record import BatchRun
from inferd.settings import ModelSettings
from inferd.types import InferenceResponse
from inferd.workers import ipc, messages
from inferd.workers.base import Call, Control, Execution, Holder, LoadedInstance, ResponseStream
from inferd.workers.channel import Channel

logger = logging.getLogger(__name__)

# Calls a protocol process may have at the host at once per model version: enough that
# none waits here (the host queues, batches and bounds them), bounded so a runaway
# client cannot make one process hold unbounded work.
HOSTED_SLOTS = 4096
# How long a load waits for the host's socket at the server's start (the host imports
# and binds it before loading its models: seconds, under load), or while a host that
# ran is restarted. A host that never ran is not waited for: the coordinator starts
# one before any load that needs it, so only a process's own start-up load can meet
# none (a hosted model's folder added since the server started), and fails at once.
CONNECT_PATIENCE_SECONDS = 120.0
_CONNECT_POLL_SECONDS = 0.05
CLIENT_LEFT = "The client disconnected while its request waited in the model host"
# How long an answer may take before the client's disconnect is watched (_answer).
WATCH_AFTER_SECONDS = 0.05
# A hosted instance lives in the host: one holder, the host.
HOST_HOLDER: Holder = (-2, 1)


class HostedPool:
    """The model host's models (a Pool), reached over the socket at ``path``."""

    def __init__(self, path: Path, host_at_start: bool = False) -> None:
        """``host_at_start``: the host starts with this process (wait for its socket)."""
        self._path = path
        self._host_at_start = host_at_start
        self._channel: Channel | None = None
        self._connecting: asyncio.Task[Channel] | None = None
        self._bound: dict[int, tuple[str, str | None]] = {}
        self._failure_handler: Callable[[int, str], None] | None = None
        self._closing = False

    async def start(self) -> None:
        """Nothing: the host is reached on the first load (it may still be starting)."""

    async def close(self) -> None:
        self._closing = True
        if self._channel is not None:
            self._channel.close()

    # Loading

    async def load(self, instance_id: int, settings: ModelSettings) -> LoadedInstance:
        """Bind ``instance_id`` to the host's version of this model, which the host
        has loaded (the coordinator applies a load there first); what it offers. A
        host that dies meanwhile (at the server's start, while it loads) is waited
        for again: its restart loads the model, and this binds to that."""
        key = (settings.name, settings.version)
        ran = self._host_at_start or self._path.exists()  # its socket stays when it dies
        deadline = time.monotonic() + (CONNECT_PATIENCE_SECONDS if ran else 0.0)
        while True:
            channel = await self._connected(patience=deadline - time.monotonic())
            try:
                bind = messages.BindHosted(*key)
                instance: LoadedInstance = await channel.call(bind, instance_id)
            except WorkerLost:
                if time.monotonic() >= deadline:
                    raise
                continue
            self._bound[instance_id] = key
            return instance

    async def unload(self, instance_id: int) -> None:
        if self._bound.pop(instance_id, None) is None:
            return
        channel = self._channel
        if channel is not None and not channel.closed:
            with contextlib.suppress(WorkerLost):
                await channel.call(messages.Unload(), instance_id)

    # Calls

    def predict(self, call: Call) -> Execution:
        """Sent now when connected. Inline, not sent: a client that leaves (its call
        cancelled, or its disconnect seen) takes its request out of the host's queue
        as out of a lone server's (CANCEL), so its slot here is free at once."""
        channel = self._channel
        if channel is None or channel.closed:
            return Execution.inline(self._predict_once_connected(call))
        return Execution.inline(_answer(channel, self._send(channel, call), call))

    async def _predict_once_connected(self, call: Call) -> InferenceResponse:
        channel = await self._connected(patience=0.0)
        return await _answer(channel, self._send(channel, call), call)

    def _send(self, channel: Channel, call: Call) -> asyncio.Future[InferenceResponse]:
        packed = ipc.pack_request(call.request)
        if call.run is None:
            predict = messages.Predict(packed)
            sent = channel.start_call(predict, call.instance_id, ipc.unpack_response)
        else:
            timed = partial(_unpack_timed, call.run)
            sent = channel.start_call(messages.PredictTraced(packed), call.instance_id, timed)
        # Sent before its Execution is awaited: one dropped unawaited (its awaiter gone
        # first) still ends here, and its error is nobody's to log.
        sent.add_done_callback(_retrieved)
        return sent

    def stream(self, call: Call) -> ResponseStream:
        channel = self._channel
        if channel is None or channel.closed:
            # Streams start at once or not at all (Pool.stream); the next call reconnects.
            self._reconnect_soon()
            raise ModelNotReady(self._unreachable())
        return channel.open_stream(call.instance_id, call.request)

    def control(self, message: Control) -> None:
        """Dropped: the host gets what is server-wide (the log level) from the
        coordinator, and no hosted version here is a sequence of its own."""

    # What the dispatcher reads

    def capacity(self, instance_id: int) -> int:
        return HOSTED_SLOTS if instance_id in self._bound else 0

    def holders(self, instance_id: int) -> list[Holder]:
        return [HOST_HOLDER] if instance_id in self._bound else []

    def watch(self, instance_id: int, on_change: Callable[[], None]) -> None:
        """Nothing changes here: the host's own pool watches its workers."""

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        """Called when the host gives up a version bound here (messages.GIVEN_UP), so
        this process's index and answers show it as the host's do."""
        self._failure_handler = handler

    def _given_up(self, instance_id: int, reason: str) -> None:
        if self._failure_handler is not None and instance_id in self._bound:
            self._failure_handler(instance_id, reason)

    # The connection

    async def _connected(self, patience: float) -> Channel:
        """The open channel to the host, connecting (and binding every instance
        again) when it is not; ModelNotReady when the host cannot be reached within
        ``patience`` seconds."""
        channel = self._channel
        if channel is not None and not channel.closed:
            return channel
        return await asyncio.shield(self._attempt(patience))

    def _reconnect_soon(self) -> None:
        if not self._closing:
            self._attempt(0.0)

    def _attempt(self, patience: float) -> asyncio.Task[Channel]:
        """The connection attempt under way, or a new one; forgotten once it ends (a
        failed one is retried by the next call)."""
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect(patience))
            self._connecting.add_done_callback(self._attempt_ended)
        return self._connecting

    def _attempt_ended(self, task: asyncio.Task[Channel]) -> None:
        if self._connecting is task:
            self._connecting = None
        if not task.cancelled():
            task.exception()  # retrieved here too: an attempt nobody awaited still ends

    async def _connect(self, patience: float) -> Channel:
        deadline = time.monotonic() + patience
        while True:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.setblocking(False)
                await asyncio.get_running_loop().sock_connect(sock, str(self._path))
                break
            except OSError:
                sock.close()
                if self._closing or time.monotonic() >= deadline:
                    raise ModelNotReady(self._unreachable()) from None
                await asyncio.sleep(_CONNECT_POLL_SECONDS)
        channel = await Channel.open(sock, self._describe_loss, self._lost)
        channel.on_given_up = self._given_up
        for instance_id, key in list(self._bound.items()):
            with contextlib.suppress(Exception):  # that version answers its own calls
                await channel.call(messages.BindHosted(*key), instance_id)
        self._channel = channel
        return channel

    def _lost(self) -> None:
        if not self._closing:
            logger.warning("Lost the connection to the model host; reconnecting on the next call")

    @staticmethod
    def _describe_loss() -> str:
        return "The model host stopped while it ran the request; it is being restarted"

    @staticmethod
    def _unreachable() -> str:
        return "The model host is not running (it is starting or being restarted); retry shortly"


async def _answer(
    channel: Channel, answer: asyncio.Future[InferenceResponse], call: Call
) -> InferenceResponse:
    """The host's answer; a client that leaves first has the host told (CANCEL), which
    takes its request out of the host's queue. Leaving is watched only once an answer
    is late (:data:`WATCH_AFTER_SECONDS`): a watch per request cost the protocol
    processes a seventh of their CPU, and the host a quarter, for clients that are
    answered long before they could leave."""
    watch = None
    if call.disconnected is not None:
        loop = asyncio.get_running_loop()
        watch = loop.call_later(WATCH_AFTER_SECONDS, _watch, channel, answer, call.disconnected)
    try:
        return await answer
    except asyncio.CancelledError:  # a cancelled gRPC call (its task), or the server's cut
        channel.cancel_call(answer)
        raise
    finally:
        if watch is not None:
            watch.cancel()


def _watch(channel: Channel, answer: asyncio.Future[InferenceResponse], gone: Disconnected) -> None:
    """From now until ``answer`` comes: if the client leaves first, the call fails (as
    dispatch's ClientGone for a request leaving a lone server's queue) and the host is
    told."""
    if answer.done():
        return
    watcher = asyncio.ensure_future(gone())

    def left(_: asyncio.Future[object]) -> None:
        if not watcher.cancelled() and watcher.exception() is None and not answer.done():
            channel.cancel_call(answer)
            answer.set_exception(ConnectionAbortedError(CLIENT_LEFT))

    watcher.add_done_callback(left)
    answer.add_done_callback(lambda _: watcher.cancel())


def _retrieved(sent: asyncio.Future[InferenceResponse]) -> None:
    if not sent.cancelled():
        sent.exception()


def _unpack_timed(run: BatchRun, timed: messages.HostTimed) -> InferenceResponse:
    """The protocol process's side: the host's batch becomes this request's, so its
    spans show the host's queue wait, batch and worker as a lone server's would."""
    packed, record = timed
    if record is None:
        run.ran = False
    else:
        run.rows, run.requests, worker, started_ns, ended_ns, run.waited_ns = record
        run.predicted(worker, started_ns, ended_ns)
    return ipc.unpack_response(packed)
