"""One end of a framed channel on an event loop: the decode loop, written once.

The main process's end of a worker's socket (``workers/channel.py`` ``Channel``)
and the model host's end of a protocol process's connection
(``host/edge.py`` ``HostConnection``) read the same frames (:mod:`inferd.workers.ipc`)
the same way: an asyncio buffered protocol whose buffer is the
:class:`~inferd.workers.ipc.FrameDecoder`'s, so the bytes land where the messages
are decoded from; every read's whole messages are handed on at once
(:meth:`FramedProtocol.received`), and a frame that cannot be read closes the
connection, logged. Each subclass says what a message does and what closing it
means.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Generic, TypeVar, cast

from inferd.workers import ipc

Message = TypeVar("Message")


class FramedProtocol(asyncio.BufferedProtocol, Generic[Message]):
    """Frames in, messages handed on; ``unreadable``: what ``log`` (the subclass's
    module's) says when a frame cannot be read ("Closing a worker's channel: ...")."""

    def __init__(self, log: logging.Logger, unreadable: str) -> None:
        self._decoder: ipc.FrameDecoder[Message] = ipc.FrameDecoder()
        self._log = log
        self._unreadable = unreadable
        self._transport: asyncio.Transport | None = None

    def received(self, messages: list[Message]) -> None:
        """The messages one read completed, in order."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence no isinstance.
        self._transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            messages = self._decoder.buffer_updated(nbytes)
        except ipc.ProtocolError:
            self._log.exception(self._unreadable)
            self.close()
            return
        self.received(messages)

    def eof_received(self) -> bool:
        return False  # close our end too; connection_lost follows
