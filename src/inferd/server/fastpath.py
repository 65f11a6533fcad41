"""The inference route as a plain ASGI handler, in front of the Starlette app.

``POST /v2/models/{name}[/versions/{version}]/infer`` is the one route whose cost
matters: every layer of middleware and routing is paid on each request.
Handling it here, before Starlette, measured ~24% more requests/s (see
benchmarks/bench_rest.py). Everything else, and inference requests that need
CORS (they carry an ``Origin`` header), go through the Starlette app, which uses
the same :func:`infer_response` so both paths answer identically.
"""

from __future__ import annotations

import functools
import gzip
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..context import RequestContext
from ..dataplane import DataPlane
from ..errors import InferdError
from ..stats import HttpStats, InProgress, RouteStats
from .bodies import BodyReader
from .codec_rest import (
    BINARY_CONTENT_TYPE,
    HEADER_LENGTH,
    JSON_CONTENT_TYPE,
    decode_infer_request,
    encode_infer_response,
    error_body,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger(__name__)

INTERNAL_ERROR = InferdError("Internal server error; see the server logs")
INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?/infer")
# The route templates of INFER_PATH (the metrics' path label), as Starlette's routes.
INFER_TEMPLATES = ("/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer")
# Other methods are counted as OTHER: clients choose them, metrics must not grow with them.
HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"))
GZIP_MINIMUM_SIZE = 1024
GZIP_LEVEL = 6


async def infer_response(
    dataplane: DataPlane,
    name: str,
    version: str | None,
    body: bytes,
    header_length: str | None,
    receive: Receive,
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """Run one REST inference request: the response body and its headers.

    ``receive`` is the ASGI channel, read (only if the request has to queue) to
    notice a client that disconnects: its request then leaves the queue unrun.
    """
    request = decode_infer_request(body, header_length)
    context = RequestContext(disconnected=functools.partial(wait_for_disconnect, receive))
    response = await dataplane.infer(name, version, request, context)
    content, json_length = encode_infer_response(response, request)
    if json_length is None:
        return content, [(b"content-type", JSON_CONTENT_TYPE.encode())]
    return content, [
        (b"content-type", BINARY_CONTENT_TYPE.encode()),
        (b"inference-header-content-length", str(json_length).encode()),
    ]


class FastInferApp:
    """ASGI app that answers inference requests itself and passes the rest on."""

    def __init__(
        self,
        app: ASGIApp,
        dataplane: DataPlane,
        body_reader: BodyReader,
        gzip_enabled: bool,
        http_stats: HttpStats | None = None,
    ) -> None:
        self.app = app
        self.dataplane = dataplane
        self.body_reader = body_reader
        self.gzip_enabled = gzip_enabled
        self.http_stats = http_stats
        # Metrics of the inference routes, bound once (None: metrics are off).
        self._infer_routes: tuple[RouteStats, ...] = ()
        self._posts_in_progress: InProgress | None = None
        if http_stats is not None:
            self._infer_routes = tuple(http_stats.route("POST", path) for path in INFER_TEMPLATES)
            self._posts_in_progress = http_stats.in_progress_of("POST")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = None
        if scope["type"] == "http" and scope["method"] == "POST":
            match = INFER_PATH.fullmatch(_route_path(scope))
        if match is None:
            await self._pass_on(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if b"origin" in headers:  # CORS: the Starlette app's middleware handles it
            await self._pass_on(scope, receive, send)
            return
        in_progress = self._posts_in_progress
        if in_progress is None:
            await self._infer(match, headers, receive, send)
            return
        # Recorded here rather than in a wrapper: one coroutine less per request.
        route = self._infer_routes[match.group(2) is not None]
        in_progress.count += 1
        started = time.perf_counter()
        status = 0
        try:
            status = await self._infer(match, headers, receive, send)
        finally:
            in_progress.count -= 1
            if status:
                route.finished(status, time.perf_counter() - started)

    async def _pass_on(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.http_stats is None or scope["type"] != "http":
            await self.app(scope, receive, send)
        else:
            await self._observed(self.http_stats, scope, receive, send)

    async def _observed(
        self, http_stats: HttpStats, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Pass a request to Starlette, recording it under its route's template."""
        method = scope["method"] if scope["method"] in HTTP_METHODS else "OTHER"
        status = 0

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        in_progress = http_stats.in_progress_of(method)
        in_progress.count += 1
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send_observed)
        finally:
            in_progress.count -= 1
            if status:
                # Starlette leaves the matched route in the scope.
                path = getattr(scope.get("route"), "path", None) or HttpStats.UNMATCHED
                http_stats.route(method, path).finished(status, time.perf_counter() - started)

    async def _infer(
        self, match: re.Match[str], headers: dict[bytes, bytes], receive: Receive, send: Send
    ) -> int:
        """Answer one inference request; the status it answered with (0: none)."""
        try:
            body = await self.body_reader.read(_receive_chunks(receive), _decoded(headers))
        except ConnectionAbortedError:
            return 0  # nobody is left to answer
        except InferdError as error:
            return await self._send_error(error, headers, send)
        try:
            header_length = headers.get(HEADER_LENGTH.encode())
            content, response_headers = await infer_response(
                self.dataplane,
                match.group(1),
                match.group(2),
                body,
                header_length.decode("latin-1") if header_length is not None else None,
                receive,
            )
        except ConnectionAbortedError:
            return 0  # the client left while its request was queued
        except InferdError as error:
            return await self._send_error(error, headers, send)
        except Exception:
            logger.exception("Unexpected error serving inference for %r", match.group(1))
            return await self._send_error(INTERNAL_ERROR, headers, send)
        await self._send(200, content, response_headers, headers, send)
        return 200

    async def _send_error(self, error: InferdError, headers: dict[bytes, bytes], send: Send) -> int:
        response_headers = [(b"content-type", JSON_CONTENT_TYPE.encode())]
        response_headers += [(k.encode(), v.encode()) for k, v in error_headers(error)]
        status = error.code.http_status
        await self._send(status, error_body(error.message), response_headers, headers, send)
        return status

    async def _send(
        self,
        status: int,
        content: bytes,
        response_headers: list[tuple[bytes, bytes]],
        request_headers: dict[bytes, bytes],
        send: Send,
    ) -> None:
        if self.gzip_enabled and len(content) >= GZIP_MINIMUM_SIZE:
            # Compressed or not, this answer depends on Accept-Encoding: tell caches.
            response_headers.append((b"vary", b"Accept-Encoding"))
            if _accepts_gzip(request_headers):
                content = gzip.compress(content, GZIP_LEVEL)
                response_headers.append((b"content-encoding", b"gzip"))
        response_headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": content})


def error_headers(error: InferdError) -> list[tuple[str, str]]:
    """Extra headers an error answer carries (Retry-After when overloaded)."""
    retry_after = getattr(error, "retry_after", None)
    if retry_after is None:
        return []
    return [("retry-after", str(max(1, round(retry_after))))]


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path):
        return path[len(root_path) :]
    return path


def _decoded(headers: dict[bytes, bytes]) -> dict[str, str]:
    wanted = (b"content-length", b"content-encoding")
    return {k.decode(): headers[k].decode("latin-1") for k in wanted if k in headers}


def _accepts_gzip(headers: dict[bytes, bytes]) -> bool:
    """Whether Accept-Encoding lists gzip with a quality above 0 (``gzip;q=0`` refuses it)."""
    for coding in headers.get(b"accept-encoding", b"").split(b","):
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


async def wait_for_disconnect(receive: Receive) -> None:
    """Return once the client has disconnected (the body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _receive_chunks(receive: Receive) -> Any:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("the client disconnected")
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
