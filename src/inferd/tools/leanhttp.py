"""The one HTTP/1.1 client of the tools and the benchmarks: an asyncio Protocol parsing
answers in place.

Cheaper per request than stream readers (no readuntil/readexactly coroutines): the
answer is parsed in ``data_received`` and wakes one future, with a regular
expression per header it needs rather than a dict of them all (what a load
generator needs). A body comes with a Content-Length (inferd, uvicorn and Triton
send one for every unary answer) or chunked (a streamed answer, read whole).
"""

from __future__ import annotations

import asyncio
import re
from typing import cast

from inferd.tools.v2client import Endpoint, Reply

_HEAD_END = b"\r\n\r\n"
# The headers the client reads, found in one scan of the head (lower-cased names).
_FIELDS = re.compile(
    rb"\r\n(content-length|transfer-encoding|retry-after|connection):[ \t]*([^\r]*)",
    re.IGNORECASE,
)
NO_LENGTH = "the answer has neither a Content-Length nor a chunked body"


def parse_answer(buffer: bytearray) -> tuple[Reply, int] | None:
    """The answer at the start of ``buffer`` and how many bytes it took; None until it
    is all there. ``Reply.close`` tells that the server closes the connection after it."""
    end = buffer.find(_HEAD_END)
    if end < 0:
        return None
    head = bytes(buffer[: end + 2])  # keeps the last header's CRLF for the pattern
    fields = {name.lower(): value for name, value in _FIELDS.findall(head)}
    start = end + 4
    status = int(head[9:12])
    if (length := fields.get(b"content-length")) is not None:  # the common case first
        used = start + int(length)
        if len(buffer) < used:
            return None
        reply = Reply(status, bytes(buffer[start:used]))
    elif fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        parsed = _dechunk(buffer, start)
        if parsed is None:
            return None
        body, used = parsed
        reply = Reply(status, body)
    else:
        used = start
        reply = Reply(status, b"", error="" if _bodiless(status) else NO_LENGTH)
    if (retry := fields.get(b"retry-after")) is not None:
        reply.retry_after = seconds(retry.decode("latin-1"))
    reply.close = fields.get(b"connection", b"").lower() == b"close"
    return reply, used


def _bodiless(status: int) -> bool:
    """Answers HTTP/1.1 sends without a body (1xx, 204 No Content, 304 Not Modified)."""
    return status < 200 or status in (204, 304)


def _dechunk(buffer: bytearray, start: int) -> tuple[bytes, int] | None:
    """The chunked body starting at ``start`` and where it ends; None until it ended."""
    if not buffer.endswith(_HEAD_END):  # the last chunk (and trailers) end the answer
        return None
    pieces: list[bytes] = []
    at = start
    while (line_end := buffer.find(b"\r\n", at)) >= 0:
        size = int(bytes(buffer[at:line_end]).split(b";")[0], 16)
        if size == 0:
            trailers_end = buffer.find(_HEAD_END, line_end)
            return (b"".join(pieces), trailers_end + 4) if trailers_end >= 0 else None
        at = line_end + 2 + size + 2
        if len(buffer) < at:
            return None
        pieces.append(bytes(buffer[line_end + 2 : at - 2]))
    return None


def seconds(value: str) -> float | None:
    """A Retry-After in seconds; None for an HTTP date (no wait we can compute cheaply:
    the caller backs off as it would without one)."""
    try:
        return float(value)
    except ValueError:
        return None


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
        parsed = parse_answer(self.buffer)
        if parsed is None:
            return
        reply, used = parsed
        del self.buffer[:used]
        if reply.close and self.transport is not None:
            self.closed = True  # the next exchange opens a new connection
            self.transport.close()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(reply)


class LeanHttpConnection:
    """One keep-alive connection, one request at a time; reconnects when closed.

    ``exchange`` never raises for the network: a failure is a Reply of status 0
    whose ``error`` says what happened (the connection is then dropped)."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.endpoint, self.timeout_s = endpoint, timeout_s
        self._protocol: _Protocol | None = None

    async def exchange(self, request: bytes) -> Reply:
        try:
            # asyncio.timeout, not wait_for: no task per request (the load generator's cost)
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
