"""The main process's end of a worker's socket: calls out, replies back, loss noticed.

See messages.py for what travels on it (and ipc.py for how);
:class:`~inferd.workers.process.WorkerProcess` owns one per worker process, a
protocol process one to the model host (``host/client.py``). Streams travel on it
too: each is known by the call id of its ``Stream`` command, and its replies go
to its :class:`~inferd.workers.remote_stream.RemoteStream`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections.abc import Callable
from functools import partial
from typing import Any

from inferd import custom_metrics
from inferd.errors import ModelError, WorkerLost, WorkerLostUnread
from inferd.types import InferenceRequest
from inferd.workers import ipc, messages
from inferd.workers.framed import FramedProtocol
from inferd.workers.remote_stream import STREAM_WINDOW, RemoteStream

logger = logging.getLogger(__name__)


class Channel(FramedProtocol[messages.Reply]):
    """The main process's end of one worker's socket.

    Calls are multiplexed: each gets an id, its future is resolved when the reply
    with that id arrives, in whatever order the worker answers. When the socket
    closes (the worker exited or died), every call still waiting and every open
    stream fails with WorkerLost (``describe_loss`` and ``describe_stream_loss`` say
    why) and ``on_closed`` is called once.

    A worker process says which requests it has read (``messages.READ``) before it
    runs them; the host does not. So a worker's request still unread when the
    socket closes fails with WorkerLostUnread (it never ran: retry.py sends it to
    another worker) and is counted in ``unread_work``, not as running at the death.
    """

    def __init__(
        self,
        describe_loss: Callable[[], str],
        on_closed: Callable[[], None],
        describe_stream_loss: Callable[[], str] | None = None,
        reads_acknowledged: bool = False,
    ) -> None:
        super().__init__(
            logger, "Closing a worker's channel: it sent a message that cannot be read"
        )
        self._reads_acknowledged = reads_acknowledged
        self._describe_loss = describe_loss
        self._describe_stream_loss = describe_stream_loss or describe_loss
        self._on_closed = on_closed
        # Each call waiting for its reply: its future, what turns the reply into the
        # result (so a call's result is ready when its awaiter wakes up), and whether
        # it is a request (work a worker acknowledges reading).
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[Any], Any] | None, bool]] = {}
        # The last request (Predict or Stream) the worker read: every request up to it
        # has been read (it reads in order); -1: none, or the other end is the host.
        self._read_through = -1
        self.unread_work = 0  # requests and streams it had not read when it closed
        # Told (instance id, reason) when the model host gives up a version bound here.
        self.on_given_up: Callable[[int, str], None] | None = None
        self._streams: dict[int, RemoteStream] = {}  # open streams, by call id
        self._call_ids = itertools.count()
        self.closed = False

    @classmethod
    async def open(
        cls,
        sock: socket.socket,
        describe_loss: Callable[[], str],
        on_closed: Callable[[], None],
        describe_stream_loss: Callable[[], str] | None = None,
        reads_acknowledged: bool = False,
    ) -> Channel:
        """The channel on ``sock``; ``reads_acknowledged``: the other end is a worker
        process, which says which requests it read (messages.READ)."""
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(
            lambda: cls(describe_loss, on_closed, describe_stream_loss, reads_acknowledged),
            sock=sock,
        )
        return channel

    def start_call(
        self,
        command: messages.Command,
        instance_id: int = 0,
        decode: Callable[[Any], Any] | None = None,
    ) -> asyncio.Future[Any]:
        """Send one command now; the future gets its result (through ``decode``, if
        given) or the worker's error. Raises WorkerLost if the channel is closed."""
        if self.closed or self._transport is None:
            raise WorkerLost(self._describe_loss())
        call_id = next(self._call_ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[call_id] = (future, decode, command.KIND in messages.WORK_KINDS)
        self._transport.writelines(messages.encode_command(call_id, instance_id, command))
        return future

    def cancel_call(self, future: asyncio.Future[Any]) -> None:
        """Give up on a call ``start_call`` sent: its reply, if any, is dropped, and the
        other end is sent ``Cancel`` for it (the model host takes a forwarded request
        out of its queue; a worker is sent it by :meth:`ask_to_cancel`). A scan: calls
        are given up rarely, and a reverse index would cost every call."""
        for call_id, (pending, _, _) in self._pending.items():
            if pending is future:
                del self._pending[call_id]
                self._stream_command(call_id, messages.Cancel())
                return

    def ask_to_cancel(self, future: asyncio.Future[Any]) -> None:
        """Send ``Cancel`` for a call ``start_call`` sent and still wait for its reply
        (a worker process cancels its ``predict`` and answers: its slot is free then)."""
        for call_id, (pending, _, _) in self._pending.items():
            if pending is future:
                self._stream_command(call_id, messages.Cancel())
                return

    def open_stream(
        self, instance_id: int, request: InferenceRequest, window: int = STREAM_WINDOW
    ) -> RemoteStream:
        """Start ``predict_stream`` in the worker now; its responses as they come.
        Raises WorkerLost if the channel is closed."""
        if self.closed or self._transport is None:
            raise WorkerLost(self._describe_stream_loss())
        call_id = next(self._call_ids)
        stream = RemoteStream(partial(self._stream_command, call_id), window)
        self._streams[call_id] = stream
        command = messages.Stream(ipc.pack_request(request), window)
        self._transport.writelines(messages.encode_command(call_id, instance_id, command))
        return stream

    def _stream_command(self, call_id: int, command: messages.Credit | messages.Cancel) -> None:
        """A stream's credit or cancel; dropped once the channel is closed (the stream
        has failed then)."""
        if not self.closed and self._transport is not None:
            self._transport.writelines(messages.encode_command(call_id, 0, command))

    async def call(self, command: messages.Command, instance_id: int = 0) -> Any:
        """Send one command and wait for its reply (a result, or the worker's error)."""
        return await self.start_call(command, instance_id)

    def close(self) -> None:
        """Close the socket; the worker sees end-of-file and exits."""
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close the socket and fail what waits on it now, not on a later loop turn:
        for a worker being killed, so that nothing more is sent to it meanwhile."""
        self.close()
        self.connection_lost(None)

    # FramedProtocol

    def received(self, replies: list[messages.Reply]) -> None:
        streams = self._streams
        for kind, call_id, body in replies:
            if kind == messages.STREAMED:
                stream = streams.get(call_id)
                if stream is not None:
                    stream.received(body)
                continue
            if kind == messages.READ:
                self._read_through = call_id
                continue
            if kind == messages.GIVEN_UP:
                if self.on_given_up is not None:
                    self.on_given_up(call_id, body)
                continue
            if kind == messages.METRICS:
                custom_metrics.deliver(body)
                continue
            if kind == messages.ENDED or (kind == messages.ERROR and call_id in streams):
                stream = streams.pop(call_id, None)
                if stream is not None:
                    stream.ended(None if kind == messages.ENDED else ipc.error_from_wire(body))
                continue
            future, decode, _ = self._pending.pop(call_id, (None, None, False))
            if future is None or future.done():
                continue  # its caller gave up (cancelled)
            if kind != messages.RESULT:
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

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        pending, self._pending = self._pending, {}
        unread = self._unread_work(pending)
        for call_id, (future, _, _) in pending.items():
            if not future.done():
                lost = WorkerLostUnread if call_id in unread else WorkerLost
                future.set_exception(lost(self._describe_loss()))
        streams, self._streams = self._streams, {}
        for call_id, stream in streams.items():
            lost = WorkerLostUnread if call_id in unread else WorkerLost
            stream.ended(lost(self._describe_stream_loss()))
        self.unread_work = len(unread)
        self._on_closed()

    def _unread_work(self, pending: dict[int, tuple[Any, Any, bool]]) -> set[int]:
        """The call ids of the requests and streams the worker had not read; none where
        the other end never says what it read (the host)."""
        if not self._reads_acknowledged:
            return set()
        read = self._read_through
        unread = {call_id for call_id, (_, _, work) in pending.items() if work and call_id > read}
        return unread | {call_id for call_id in self._streams if call_id > read}
