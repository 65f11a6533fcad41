"""The main process's end of a worker's socket: calls out, replies back, loss noticed.

See messages.py for what travels on it (and ipc.py for how);
:class:`~inferd.workers.process.WorkerProcess` owns one per worker process, a
protocol process one to the model host (``host_client.py``). Streams travel on it
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
from typing import Any, cast

from inferd import custom_metrics
from inferd.errors import ModelError, WorkerLost
from inferd.types import InferenceRequest
from inferd.workers import ipc, messages
from inferd.workers.remote_stream import STREAM_WINDOW, RemoteStream

logger = logging.getLogger(__name__)


class Channel(asyncio.BufferedProtocol):
    """The main process's end of one worker's socket.

    Calls are multiplexed: each gets an id, its future is resolved when the reply
    with that id arrives, in whatever order the worker answers. When the socket
    closes (the worker exited or died), every call still waiting and every open
    stream fails with WorkerLost (``describe_loss`` and ``describe_stream_loss`` say
    why) and ``on_closed`` is called once.
    """

    def __init__(
        self,
        describe_loss: Callable[[], str],
        on_closed: Callable[[], None],
        describe_stream_loss: Callable[[], str] | None = None,
    ) -> None:
        self._describe_loss = describe_loss
        self._describe_stream_loss = describe_stream_loss or describe_loss
        self._on_closed = on_closed
        self._decoder: ipc.FrameDecoder[messages.Reply] = ipc.FrameDecoder()
        # Each call waiting for its reply: its future and what turns the reply into
        # the result (so a call's result is ready when its awaiter wakes up).
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[Any], Any] | None]] = {}
        self._streams: dict[int, RemoteStream] = {}  # open streams, by call id
        self._call_ids = itertools.count()
        self._transport: asyncio.Transport | None = None
        self.closed = False

    @classmethod
    async def open(
        cls,
        sock: socket.socket,
        describe_loss: Callable[[], str],
        on_closed: Callable[[], None],
        describe_stream_loss: Callable[[], str] | None = None,
    ) -> Channel:
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(
            lambda: cls(describe_loss, on_closed, describe_stream_loss), sock=sock
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
        self._pending[call_id] = (future, decode)
        self._transport.writelines(messages.encode_command(call_id, instance_id, command))
        return future

    def cancel_call(self, future: asyncio.Future[Any]) -> None:
        """Give up on a call ``start_call`` sent: its reply, if any, is dropped, and the
        other end is sent ``Cancel`` for it (the model host takes a forwarded request
        out of its queue; a worker is sent it by :meth:`ask_to_cancel`). A scan: calls
        are given up rarely, and a reverse index would cost every call."""
        for call_id, (pending, _) in self._pending.items():
            if pending is future:
                del self._pending[call_id]
                self._stream_command(call_id, messages.Cancel())
                return

    def ask_to_cancel(self, future: asyncio.Future[Any]) -> None:
        """Send ``Cancel`` for a call ``start_call`` sent and still wait for its reply
        (a worker process cancels its ``predict`` and answers: its slot is free then)."""
        for call_id, (pending, _) in self._pending.items():
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

    # asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence no isinstance.
        self._transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            replies = self._decoder.buffer_updated(nbytes)
        except ipc.ProtocolError:
            logger.exception("Closing a worker's channel: it sent a message that cannot be read")
            self.close()
            return
        streams = self._streams
        for kind, call_id, body in replies:
            if kind == messages.STREAMED:
                stream = streams.get(call_id)
                if stream is not None:
                    stream.received(body)
                continue
            if kind == messages.METRICS:
                custom_metrics.deliver(body)
                continue
            if kind == messages.ENDED or (kind == messages.ERROR and call_id in streams):
                stream = streams.pop(call_id, None)
                if stream is not None:
                    stream.ended(None if kind == messages.ENDED else ipc.error_from_wire(body))
                continue
            future, decode = self._pending.pop(call_id, (None, None))
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
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.ended(WorkerLost(self._describe_stream_loss()))
        self._on_closed()
