"""A client of the model host: the models it runs, reached over its socket.

With several protocol processes, a model that cannot be copied into each of them
(host/placement.py: a GPU, adaptive batching, sequences, its own worker
processes) is loaded once, in the model host, a server of its own with no public
port (docs/design.md "The model host"). A protocol process still takes such a
model's requests off the wire and decodes them; its data plane hands each to the
host backend (host/backend.py), which sends it, decoded, through this
client over ``host.sock`` and hands back its answer. The host runs it through its
own data plane: one queue and one batcher for every process's requests, one
holder for a sequence's, whichever process took them. Nothing of the protocol
process's dispatch runs on the way: the host's queue, batcher and limits are the
model's.

The socket carries the worker IPC (``messages.py``, through the same
:class:`Channel` as a worker's): ``BindHosted`` binds an instance id of this
process to the host's version of that name, ``Predict`` / ``PredictTraced`` /
``Stream`` run a request there, ``Cancel`` takes one whose client left out of the
host's queue. A worker's runtimes reach their own server's models through one
too (workers/calls_client.py).

When the host dies, what it was running fails (WorkerLost: 503), the supervisor
starts it again, and the next call here connects again and binds every instance
anew. While the host is down a call waits for it, as a request waits for a model's
restarting last worker (dispatch/queued.py): at most :data:`RESTART_PATIENCE_SECONDS`,
and no more calls at once than ``most_waiting`` (this process's share of the queue
bound); past either, and while a host that never ran is not there, it fails with
ModelNotReady (503) at once. A stream fails at once (the next call reconnects).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from inferd.context import Disconnected
from inferd.errors import ModelNotReady, WorkerLost
from inferd.observability.trace_record import BatchRun
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers import ipc, messages
from inferd.workers.base import LoadedInstance, ResponseStream
from inferd.workers.channel import Channel

logger = logging.getLogger(__name__)

# How long a bind waits for the host's socket at the server's start (the host imports
# and binds it before loading its models: seconds, under load), or while a host that
# ran is restarted. A host that never ran is not waited for: the coordinator starts
# one before any load that needs it, so only a process's own start-up load can meet
# none (a hosted model's folder added since the server started), and fails at once.
CONNECT_PATIENCE_SECONDS = 120.0
_CONNECT_POLL_SECONDS = 0.05
CLIENT_LEFT = "The client disconnected while its request waited in the model host"
# How long a call waits for a host that ran to be back (restarted by the supervisor: its
# start, its models' loads, its catch-up), as a request waits for a restarting worker.
RESTART_PATIENCE_SECONDS = 30.0
# How long an answer may take before the client's disconnect is watched (_answer).
WATCH_AFTER_SECONDS = 0.05


class HostClient:
    """The model host's models, reached over the socket at ``path``; each bound to an
    instance id of this process's choosing."""

    def __init__(
        self,
        path: Path,
        host_at_start: bool = False,
        patience: float | None = None,
        most_waiting: int | None = None,
    ) -> None:
        """``host_at_start``: the host starts with this process (wait for its socket);
        ``patience``: how long a load waits for the socket (default: as said above);
        ``most_waiting``: how many calls may wait for the host at once (None: any)."""
        self._path = path
        self._most_waiting = most_waiting
        self._waiting = 0  # calls waiting for the host to be back
        self._host_at_start = host_at_start
        self._patience = patience
        self._channel: Channel | None = None
        self._connecting: asyncio.Task[Channel] | None = None
        self._bound: dict[int, tuple[str, str | None]] = {}
        self._failure_handler: Callable[[int, str], None] | None = None
        self._closing = False
        self._server_stopping = False

    def server_stopping(self) -> None:
        """The server stops, the host with it: losing the host is no failure now."""
        self._server_stopping = True

    async def close(self) -> None:
        self._closing = True
        if self._channel is not None:
            self._channel.close()

    # Binding

    async def bind(self, instance_id: int, name: str, version: str | None) -> LoadedInstance:
        """Bind ``instance_id`` to the host's version of this model, which the host
        has loaded (the coordinator applies a load there first); what it offers. A
        host that dies meanwhile (at the server's start, while it loads) is waited
        for again: its restart loads the model, and this binds to that."""
        key = (name, version)
        ran = self._host_at_start or self._path.exists()  # its socket stays when it dies
        patience = self._patience
        if patience is None:
            patience = CONNECT_PATIENCE_SECONDS if ran else 0.0
        deadline = time.monotonic() + patience
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

    async def unbind(self, instance_id: int) -> None:
        if self._bound.pop(instance_id, None) is None:
            return
        channel = self._channel
        if channel is not None and not channel.closed:
            with contextlib.suppress(WorkerLost):
                await channel.call(messages.Unload(), instance_id)

    # Calls

    def infer(
        self,
        instance_id: int,
        request: InferenceRequest,
        run: BatchRun | None = None,
        disconnected: Disconnected | None = None,
    ) -> Coroutine[Any, Any, InferenceResponse]:
        """The host's answer to ``request``, sent now when connected (``run``: the
        record of a traced request, which the host's own fills). A client that leaves
        (its call cancelled, or its disconnect seen) takes its request out of the
        host's queue as out of a lone server's (CANCEL)."""
        channel = self._channel
        if channel is None or channel.closed:
            return self._infer_once_connected(instance_id, request, run, disconnected)
        return _answer(channel, self._send(channel, instance_id, request, run), disconnected)

    async def _infer_once_connected(
        self,
        instance_id: int,
        request: InferenceRequest,
        run: BatchRun | None,
        disconnected: Disconnected | None,
    ) -> InferenceResponse:
        channel = await self._back()
        sent = self._send(channel, instance_id, request, run)
        return await _answer(channel, sent, disconnected)

    async def _back(self) -> Channel:
        """The channel, once the host answers: waited for while a host that ran is
        restarted (:data:`RESTART_PATIENCE_SECONDS`, ``most_waiting`` calls at once)."""
        if not self._path.exists():  # never ran (its socket stays once it ran)
            return await self._connected(patience=0.0)
        if self._most_waiting is not None and self._waiting >= self._most_waiting:
            raise ModelNotReady(self._unreachable())  # those waiting are reconnecting
        deadline = time.monotonic() + RESTART_PATIENCE_SECONDS
        self._waiting += 1
        try:
            while True:  # an attempt under way may be one with less patience: again
                try:
                    return await self._connected(patience=deadline - time.monotonic())
                except ModelNotReady:
                    if self._closing or time.monotonic() >= deadline:
                        raise
                await asyncio.sleep(_CONNECT_POLL_SECONDS)
        finally:
            self._waiting -= 1

    def _send(
        self, channel: Channel, instance_id: int, request: InferenceRequest, run: BatchRun | None
    ) -> asyncio.Future[InferenceResponse]:
        packed = ipc.pack_request(request)
        if run is None:
            sent = channel.start_call(messages.Predict(packed), instance_id, ipc.unpack_response)
        else:
            timed = partial(_unpack_timed, run)
            sent = channel.start_call(messages.PredictTraced(packed), instance_id, timed)
        # Sent before its answer is awaited: one dropped unawaited (its awaiter gone
        # first) still ends here, and its error is nobody's to log.
        sent.add_done_callback(_retrieved)
        return sent

    def stream(self, instance_id: int, request: InferenceRequest) -> ResponseStream:
        """Start ``predict_stream`` in the host now; raises ModelNotReady when the host
        is not connected (the next call reconnects)."""
        channel = self._channel
        if channel is None or channel.closed:
            self._reconnect_soon()
            raise ModelNotReady(self._unreachable())
        return channel.open_stream(instance_id, request)

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
        if self._closing:
            return
        if self._server_stopping:  # an orderly stop: the host stopped with the server
            logger.debug("The model host closed its connection: the server is stopping")
        else:
            logger.warning("Lost the connection to the model host; reconnecting on the next call")

    @staticmethod
    def _describe_loss() -> str:
        return "The model host stopped while it ran the request; it is being restarted"

    @staticmethod
    def _unreachable() -> str:
        return "The model host is not running (it is starting or being restarted); retry shortly"


async def _answer(
    channel: Channel, answer: asyncio.Future[InferenceResponse], gone: Disconnected | None
) -> InferenceResponse:
    """The host's answer; a client that leaves first has the host told (CANCEL), which
    takes its request out of the host's queue. Leaving is watched only once an answer
    is late (:data:`WATCH_AFTER_SECONDS`): a watch per request cost the protocol
    processes a seventh of their CPU, and the host a quarter, for clients that are
    answered long before they could leave."""
    watch = None
    if gone is not None:
        loop = asyncio.get_running_loop()
        watch = loop.call_later(WATCH_AFTER_SECONDS, _watch, channel, answer, gone)
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
