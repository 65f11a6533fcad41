"""The load generator's HTTP/1.1 connection: an asyncio Protocol parsing in place.

Cheaper per request than stream readers (no readuntil/readexactly coroutines):
the answer is parsed in ``data_received`` and wakes one future. Answers must
carry a Content-Length (inferd, uvicorn and Triton always send one).
"""

from __future__ import annotations

import asyncio
import re
from typing import cast

from inferd.tools.v2client import Endpoint, Reply

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
_RETRY_AFTER = re.compile(rb"\r\nretry-after:\s*(\d+)", re.IGNORECASE)


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Reply] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(Reply(0, b"", error="the server closed the connection"))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[: end + 2])
        length = _CONTENT_LENGTH.search(head)
        size = int(length.group(1)) if length else 0
        if len(self.buffer) < end + 4 + size:
            return
        body = bytes(self.buffer[end + 4 : end + 4 + size])
        del self.buffer[: end + 4 + size]
        retry = _RETRY_AFTER.search(head)
        reply = Reply(int(head[9:12]), body, float(retry.group(1)) if retry else None)
        if length is None:
            reply.error = "the answer has no Content-Length"
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(reply)


class LeanHttpConnection:
    """One keep-alive connection, one request at a time; reconnects when closed."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self._protocol: _Protocol | None = None

    async def exchange(self, request: bytes) -> Reply:
        try:
            async with asyncio.timeout(self.timeout_s):
                protocol = self._protocol
                if protocol is None or protocol.closed:
                    protocol = self._protocol = await self._connect()
                protocol.waiter = asyncio.get_running_loop().create_future()
                assert protocol.transport is not None
                protocol.transport.write(request)
                return await protocol.waiter
        except (OSError, TimeoutError) as error:
            await self.close()
            return Reply(0, b"", error=f"{type(error).__name__}: {error}".rstrip(": "))

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(
            _Protocol, self.endpoint.host, self.endpoint.port, ssl=self.endpoint.tls
        )
        return protocol

    async def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
