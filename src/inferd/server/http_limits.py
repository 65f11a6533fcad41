"""The REST server's limits on what one client can make it hold: header bytes, connections.

uvicorn's httptools protocol has no limit on the size of a request's headers (h11's
``h11_max_incomplete_event_size`` does not apply to it), and answers its
``limit_concurrency`` with a plain-text 503. :func:`limited_protocol` makes a
protocol class that stops reading a request whose request line and headers pass
``max_header_size`` (431, then the connection closes) and answers the connection
limit with inferd's JSON error body.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .codec_rest import JSON_CONTENT_TYPE, error_body

HEADERS_TOO_LARGE = 431
# HTTP/1.1 bytes around each header's name and value (": " and CRLF).
_HEADER_FRAMING = 4


class HeadersTooLarge(Exception):
    """Raised inside the parser's callback to stop reading the request."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with ``max_header_size`` and a JSON 503."""

    max_header_size: int  # set by limited_protocol()
    max_connections: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_bytes = 0
        self._headers_too_large = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + _HEADER_FRAMING)
        super().on_header(name, value)

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self.max_header_size:
            self._headers_too_large = True
            # httptools turns it into HttpParserError: uvicorn stops reading and calls
            # send_400_response, which answers 431 instead.
            raise HeadersTooLarge

    def send_400_response(self, msg: str) -> None:
        if not self._headers_too_large:
            super().send_400_response(msg)
            return
        body = error_body(
            f"The request's headers are over max_header_size ({self.max_header_size} bytes)"
        )
        head = (
            f"HTTP/1.1 {HEADERS_TOO_LARGE} Request Header Fields Too Large\r\n"
            f"content-type: {JSON_CONTENT_TYPE}\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if app is service_unavailable:  # uvicorn's answer past limit_concurrency
            app = self._over_connection_limit
        super()._start_asgi_task(cycle, app)

    async def _over_connection_limit(self, scope: Any, receive: Any, send: Any) -> None:
        body = error_body(
            f"The server holds its max_connections ({self.max_connections}) connections; "
            "retry later"
        )
        headers = [
            (b"content-type", JSON_CONTENT_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1"),
            (b"connection", b"close"),  # frees the connection it came on
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def limited_protocol(max_header_size: int, max_connections: int) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn's ``http`` option, with these limits."""
    return type(
        "LimitedHttpToolsProtocol",
        (LimitedHttpToolsProtocol,),
        {"max_header_size": max_header_size, "max_connections": max_connections},
    )


def uvicorn_concurrency_limit(max_connections: int) -> int:
    """uvicorn's ``limit_concurrency`` for ``max_connections``: uvicorn refuses a request
    once the connections, counting the one it came on, reach the limit."""
    return max_connections + 1
