"""The REST server's ASGI app: inference straight to its endpoint, the rest through Starlette.

``POST /v2/models/{name}[/versions/{version}]/infer`` is the one route whose cost
matters: every layer of middleware and routing is paid on each request.
:class:`RestApp` hands it to :class:`InferEndpoint` before Starlette, which
measured ~24% more requests/s (see benchmarks/). Requests that need Starlette's
middleware (CORS: they carry an ``Origin`` header) reach the same endpoint through
Starlette, where it is the inference routes' endpoint, so both answer alike.
RestApp also records every request's metrics; the endpoint compresses its answers as the
client asks (server/rest/compression.py), as Triton does: only inference answers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from starlette.routing import compile_path

from inferd.observability.stats import HttpStats, RouteStats
from inferd.server.errors import http_error
from inferd.server.rest.codec import (
    BINARY_CONTENT_TYPE,
    JSON_CONTENT_TYPE,
    encode_infer_response,
)
from inferd.server.rest.compression import compress_answer
from inferd.server.routes import INFER_ROUTES, INFERENCE

if TYPE_CHECKING:
    from inferd.server.access import ApiGuard
    from inferd.server.rest.edge import RestEdge

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Other methods are counted as OTHER: clients choose them, metrics must not grow with them.
HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"))
_JSON_HEADERS = ((b"content-type", JSON_CONTENT_TYPE.encode()),)
_BINARY_TYPE = (b"content-type", BINARY_CONTENT_TYPE.encode())


class InferEndpoint:
    """Answers one inference request: read the body, decode, infer, encode, send,
    through the REST edge (server/rest/edge.py): access, context, shared memory and
    response headers are the edge's. Both the fast path and Starlette call ``answer``."""

    def __init__(self, edge: RestEdge, *, compress: bool = True) -> None:
        self.edge = edge
        self.dataplane = edge.dataplane
        self.compress = compress  # gzip_enabled: answers compressed as Accept-Encoding asks

    @property
    def guard(self) -> ApiGuard | None:
        """The guard the edge admits these requests with (None: inference is open)."""
        return self.edge.guard(INFERENCE)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """As a Starlette route's endpoint, which put the path's parts in the scope."""
        params = scope["path_params"]
        await self.answer(
            params["name"], params.get("version"), dict(scope["headers"]), receive, send
        )

    async def answer(
        self,
        name: str,
        version: str | None,
        headers: dict[bytes, bytes],
        receive: Receive,
        send: Send,
        body: bytes | None = None,
    ) -> int:
        """Answer the request; the status it answered with.

        ``receive`` is read (only if the request has to queue) to notice a client
        that disconnects: its request then leaves the queue unrun. ``body``: the
        whole body, read (and the request admitted) already by a route that answers
        as this one does (/generate with a V2 body)."""
        edge = self.edge
        claim = edge.claim()  # the shared memory regions it uses, held until it ends
        try:
            if body is None:
                edge.admit(headers)
                body = await edge.read_body(headers, receive)
            request, form = edge.decode_v2(body, headers, name, version, claim)
            context = edge.context(name, version, headers, receive)
            response = await self.dataplane.infer(name, version, request, context)
            if form.classes:
                response = self.dataplane.classified(response, form.classes)
            shared = edge.answered(context, request, response, claim)
            content, json_length = encode_infer_response(response, form, shared)
        except Exception as error:
            status, content, answer_headers = http_error(error, f"inference on model {name!r}")
        else:
            status = 200
            if json_length is None:
                answer_headers = list(_JSON_HEADERS)
            else:
                length = (b"inference-header-content-length", str(json_length).encode())
                answer_headers = [_BINARY_TYPE, length]
            edge.response_headers(context, answer_headers)
            if self.compress:
                accept = headers.get(b"accept-encoding")
                content = await compress_answer(content, accept, answer_headers)
        if claim is not None:
            claim.release()
        # As send_whole does, inline: one coroutine less on the hot path.
        answer_headers.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": answer_headers})
        await send({"type": "http.response.body", "body": content})
        return status


class RestApp:
    """ASGI app that answers inference requests itself and passes the rest to Starlette."""

    def __init__(
        self,
        app: ASGIApp,
        infer: InferEndpoint,
        *,
        cors_enabled: bool,
        http_stats: HttpStats | None = None,
    ) -> None:
        self.app = app  # Starlette, with every route of routes.API_ROUTES
        self.infer = infer
        self.cors_enabled = cors_enabled
        self.http_stats = http_stats
        # The inference routes: how to match each, and its metrics (None: metrics off).
        self._infer_routes: tuple[tuple[re.Pattern[str], RouteStats | None], ...] = tuple(
            (
                compile_path(route.path)[0],  # as Starlette matches it
                http_stats.route(route.method, route.path) if http_stats is not None else None,
            )
            for route in INFER_ROUTES
        )
        self._posts_in_progress = http_stats.in_progress_of("POST") if http_stats else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "POST":
            path = route_path(scope)
            for pattern, stats in self._infer_routes:
                match = pattern.match(path)
                if match is None:
                    continue
                headers = dict(scope["headers"])
                if b"origin" in headers and self.cors_enabled:
                    break  # the CORS middleware answers it, in Starlette
                await self._infer(match.groupdict(), headers, stats, receive, send)
                return
        await self._through_starlette(scope, receive, send)

    async def _infer(
        self,
        params: dict[str, str],
        headers: dict[bytes, bytes],
        stats: RouteStats | None,
        receive: Receive,
        send: Send,
    ) -> None:
        name, version = params["name"], params.get("version")
        in_progress = self._posts_in_progress
        if stats is None or in_progress is None:
            await self.infer.answer(name, version, headers, receive, send)
            return
        # Recorded here rather than in a wrapper: one coroutine less per request.
        in_progress.count += 1
        started = time.perf_counter()
        status = 0
        try:
            status = await self.infer.answer(name, version, headers, receive, send)
        finally:
            in_progress.count -= 1
            if status:
                stats.finished(status, time.perf_counter() - started)

    async def _through_starlette(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass a request to Starlette, recording it under its route's template."""
        http_stats = self.http_stats
        if http_stats is None:
            await self.app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in HTTP_METHODS else "OTHER"
        observed = ObservedSend(send)
        in_progress = http_stats.in_progress_of(method)
        in_progress.count += 1
        started = time.perf_counter()
        try:
            await self.app(scope, receive, observed)
        finally:
            in_progress.count -= 1
            if observed.status:
                # Starlette leaves the matched route in the scope.
                path = getattr(scope.get("route"), "path", None) or HttpStats.UNMATCHED
                elapsed = time.perf_counter() - started
                http_stats.route(method, path).finished(observed.status, elapsed)


class ObservedSend:
    """An ASGI send that remembers the status it answered (0 until the head is sent)."""

    __slots__ = ("send", "status")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status = 0

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self.send(message)


async def send_whole(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    """Answer with ``body`` in one piece (``headers`` gets its Content-Length)."""
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: Exception, serving: str) -> int:
    """Answer ``error`` as http_error says; the status sent."""
    status, body, headers = http_error(error, serving)
    await send_whole(send, status, headers, body)
    return status


def route_path(scope: Scope) -> str:
    """The request's path as routes see it (without the root path)."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path):
        return path[len(root_path) :]
    return path


def body_headers(headers: dict[bytes, bytes]) -> dict[str, str]:
    """The headers BodyReader needs, from ASGI's."""
    wanted = (b"content-length", b"content-encoding")
    return {k.decode(): headers[k].decode("latin-1") for k in wanted if k in headers}


async def wait_for_disconnect(receive: Receive) -> None:
    """Return once the client has disconnected (the body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def receive_chunks(receive: Receive) -> Any:
    """The request body's chunks; ConnectionAbortedError if the client leaves first."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("the client disconnected")
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
