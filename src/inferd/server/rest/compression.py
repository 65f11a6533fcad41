"""gzip for REST answers: the one place that compresses them.

:class:`GzipSend` wraps a request's ASGI ``send`` in front of everything else
(server/rest/fastpath.py), so inference answers and Starlette's routes alike go
through it. It is ours rather than Starlette's GZipMiddleware because that one
takes ``gzip;q=0`` for a yes (it looks for "gzip" anywhere in Accept-Encoding),
and because it costs less on the hot path: one small object per request, and
Accept-Encoding is read only for answers large enough to compress.

An answer of at least :data:`GZIP_MINIMUM_SIZE` bytes, sent in one piece, gets
``Vary: Accept-Encoding`` (it would differ for another client) and is compressed
for clients whose Accept-Encoding lists gzip with a quality above 0. Answers sent
in pieces (streams), answers already encoded and media that is compressed already
(images: the Swagger UI favicon) pass through untouched. Bodies from
:data:`GZIP_THREAD_MINIMUM_SIZE` up are compressed in a thread (zlib lets go of the
GIL), so that one large answer does not hold up every other request on the loop.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

GZIP_MINIMUM_SIZE = 1024
GZIP_LEVEL = 6
GZIP_THREAD_MINIMUM_SIZE = 128 * 1024  # as Starlette's GZipMiddleware
_COMPRESSED_MEDIA = (b"image/", b"audio/", b"video/", b"application/gzip", b"application/zip")


class GzipSend:
    """One request's ``send``, compressing its answer when the client accepts gzip."""

    __slots__ = ("_request_headers", "_send", "_start")

    def __init__(self, send: Send, request_headers: Headers) -> None:
        self._send = send
        self._request_headers = request_headers
        self._start: Message | None = None

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._start = message  # held until the body shows whether to compress
            return
        start, self._start = self._start, None
        if start is not None:  # the first message after it
            body = message.get("body", b"") if message["type"] == "http.response.body" else b""
            if len(body) >= GZIP_MINIMUM_SIZE and not message.get("more_body", False):
                message = await self._compressed(start, message, body)
            await self._send(start)
        await self._send(message)

    async def _compressed(self, start: Message, message: Message, body: bytes) -> Message:
        """The body message to send, with ``start``'s headers changed to match."""
        headers: Headers = list(start.get("headers", ()))
        for name, value in headers:
            key = name.lower()
            if key == b"content-encoding" or (
                key == b"content-type" and value.lower().startswith(_COMPRESSED_MEDIA)
            ):
                return message
        _add_vary(headers)
        if accepts_gzip(self._request_headers):
            if len(body) < GZIP_THREAD_MINIMUM_SIZE:
                body = gzip.compress(body, GZIP_LEVEL)
            else:
                body = await asyncio.to_thread(gzip.compress, body, GZIP_LEVEL)
            headers = [
                (name, value) for name, value in headers if name.lower() != b"content-length"
            ]
            headers += [
                (b"content-encoding", b"gzip"),
                (b"content-length", str(len(body)).encode()),
            ]
            message = {"type": "http.response.body", "body": body}
        start["headers"] = headers
        return message


def _add_vary(headers: Headers) -> None:
    for index, (name, value) in enumerate(headers):
        if name.lower() == b"vary":
            headers[index] = (name, value + b", Accept-Encoding")
            return
    headers.append((b"vary", b"Accept-Encoding"))


def accepts_gzip(request_headers: Headers) -> bool:
    """Whether Accept-Encoding lists gzip with a quality above 0 (``gzip;q=0`` refuses it)."""
    for name, value in request_headers:
        if name == b"accept-encoding":  # ASGI header names are lowercase
            return _lists_gzip(value)
    return False


def _lists_gzip(accept_encoding: bytes) -> bool:
    for coding in accept_encoding.split(b","):
        name, _, parameters = coding.partition(b";")
        if name.strip().lower() == b"gzip":
            parameters = parameters.strip().lower()
            if not parameters:
                return True
            try:
                return float(parameters.removeprefix(b"q=")) > 0
            except ValueError:
                return False  # a malformed quality: do not guess
    return False
