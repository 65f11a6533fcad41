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

from inferd.server.rest.codec import JSON_CONTENT_TYPE, error_body

HEADERS_TOO_LARGE = 431
# HTTP/1.1 bytes around each header's name and value (": " and CRLF).
_HEADER_FRAMING = 4


class HeadersTooLarge(Exception):
    """Raised inside the parser's callback to stop reading the request."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with ``max_header_size`` and a JSON 503.

    The header bytes are counted per read, not per header: a request pays one
    comparison unless its header section spans reads or passes the limit, and only
    then are its headers measured exactly."""

    max_header_size: int  # set by limited_protocol()
    max_connections: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_bytes = 0  # bytes read since the current header section began
        self._headers_too_large = False

    def data_received(self, data: bytes) -> None:
        self._header_bytes += len(data)
        super().data_received(data)
        scope = self.scope
        if scope is None or "method" in scope:  # no header section is being read
            self._header_bytes = 0
        elif self._header_bytes > self.max_header_size and not self._headers_too_large:
            # The header section is still incomplete past the limit: refuse it now,
            # before any more of it is read.
            self._headers_too_large = True
            self.send_400_response("")

    def on_headers_complete(self) -> None:
        if self._header_bytes > self.max_header_size and self._header_size() > (
            self.max_header_size
        ):
            self._headers_too_large = True
            # httptools turns it into HttpParserError: uvicorn stops reading and calls
            # send_400_response, which answers 431 instead.
            raise HeadersTooLarge
        super().on_headers_complete()

    def _header_size(self) -> int:
        """The bytes of this request's request line and headers, as sent."""
        framing = _HEADER_FRAMING
        return len(self.url) + sum(len(name) + len(value) + framing for name, value in self.headers)

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
