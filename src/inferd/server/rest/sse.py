"""Server-sent events: the answers of ``/infer_stream`` and ``/generate_stream``.

Each response the model yields is one event, ``data: <JSON>\\n\\n`` (MLServer's
framing), sent as soon as it is produced; responses that were ready together
(a model faster than the connection) go in one body message. Never
compressed (server/rest/compression.py leaves event streams alone) and marked for proxies not
to buffer. The status is known only once the first response is: an error before
it is an ordinary ``{"error": ...}`` answer with its status (400, 404, 503...),
except the model's own failure on ``/generate_stream`` (Triton sends it as an
event); an error after it is a last event, ``event: error\\ndata: {"error": ...}\\n\\n``, and
the body ends cleanly. A client that disconnects cancels the stream: closing the
DataPlane's iterator stops the model's generator (its ``finally`` runs).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from inferd.context import RequestContext
from inferd.errors import ModelError
from inferd.server.errors import CLIENT_DISCONNECTED, http_error
from inferd.server.rest.fastpath import (
    Message,
    Receive,
    Scope,
    Send,
    send_error,
    wait_for_disconnect,
)
from inferd.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferd.server.rest.edge import RestEdge

EVENT_STREAM_TYPE = "text/event-stream; charset=utf-8"
_EVENT_STREAM_HEADERS = (
    (b"content-type", EVENT_STREAM_TYPE.encode()),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on as it comes
)


# Writes one response of a request as JSON (V2 or flat).
Encoder = Callable[[InferenceResponse, InferenceRequest], bytes]


class Bodies(Protocol):
    """How a route reads its requests: each request, and how its responses are
    written (V2 or flat JSON: a route may take both, answering each in its kind)."""

    def decode(
        self, body: bytes, headers: dict[bytes, bytes], name: str, version: str | None
    ) -> tuple[InferenceRequest, Encoder]: ...


def event(data: bytes) -> bytes:
    """One event carrying ``data`` (JSON: orjson writes no raw newline in it)."""
    return b"data: " + data + b"\n\n"


def error_event(error_body: bytes) -> bytes:
    return b"event: error\ndata: " + error_body + b"\n\n"


class BodyEndpoint:
    """An ASGI endpoint of a model's route that reads a whole request body and decodes
    it with its :class:`Bodies` (the streaming and generate endpoints), through the
    REST edge (server/rest/edge.py)."""

    def __init__(self, edge: RestEdge, bodies: Bodies) -> None:
        self.edge = edge
        self.dataplane = edge.dataplane
        self.bodies = bodies

    async def read_body(self, scope: Scope, receive: Receive) -> tuple[dict[bytes, bytes], bytes]:
        """The request's headers and whole body (admitted already: its Starlette
        route is behind its group's guard, server/rest/api.py)."""
        headers = dict(scope["headers"])
        body = await self.edge.read_body(headers, receive)
        return headers, body

    async def read_request(
        self, scope: Scope, receive: Receive, name: str, version: str | None
    ) -> tuple[InferenceRequest, Encoder, dict[bytes, bytes]]:
        headers, body = await self.read_body(scope, receive)
        request, encode = self.bodies.decode(body, headers, name, version)
        return request, encode, headers


def model_of(scope: Scope) -> tuple[str, str | None]:
    """The model name and version of the route's path."""
    params = scope["path_params"]
    return params["name"], params.get("version")


class EventStreamEndpoint(BodyEndpoint):
    """Answers one streaming request (an ASGI endpoint of a Starlette route).

    ``model_errors_as_events``: the model's failure (ModelError) before its first
    response is sent as an error event after a 200, as Triton's generate_stream does;
    otherwise it is an ordinary error answer, as every error before the first event is."""

    def __init__(self, edge: RestEdge, bodies: Bodies, *, model_errors_as_events: bool = False):
        super().__init__(edge, bodies)
        self.model_errors_as_events = model_errors_as_events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name, version = model_of(scope)
        serving = f"streaming inference on model {name!r}"
        try:
            request, encode, headers = await self.read_request(scope, receive, name, version)
        except Exception as error:
            await send_error(send, error, serving)
            return
        answer = _StartWatch(send)
        # No disconnect to watch in the context: run_until_disconnect watches it.
        context = self.edge.context(name, version, headers, None)
        stream = self._stream(name, version, request, encode, answer, serving, context)
        if await run_until_disconnect(stream, receive) and not answer.started:
            # Nobody reads it; it shows in the metrics as the client's doing (499).
            await send_error(send, ConnectionAbortedError(CLIENT_DISCONNECTED), serving)

    async def _stream(
        self,
        name: str,
        version: str | None,
        request: InferenceRequest,
        encode: Encoder,
        send: Send,
        serving: str,
        context: RequestContext,
    ) -> None:
        responses = self.dataplane.infer_stream(name, version, request, context)
        last = None
        async with contextlib.aclosing(responses):
            failed: ModelError | None = None
            first: list[InferenceResponse] = []
            try:
                first = await anext(responses, [])
                events = _events(first, request, encode)
            except Exception as error:
                if not self.model_errors_as_events or not isinstance(error, ModelError):
                    await send_error(send, error, serving)
                    return
                events, failed = b"", error  # sent as the first event, below
            # The headers a runtime set by its first response (events follow at once).
            headers = self.edge.response_headers(context, list(_EVENT_STREAM_HEADERS))
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            try:
                if failed is not None:
                    raise failed
                if events:
                    last = first[-1]
                    await _send_chunk(send, events)
                    async for ready in responses:
                        await _send_chunk(send, _events(ready, request, encode))
                        last = ready[-1] if ready else last
            except Exception as error:
                _, error_body, _ = http_error(error, serving)
                await _send_chunk(send, error_event(error_body))
        if last is not None:
            self.edge.traced(context, last)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _events(
    responses: list[InferenceResponse], request: InferenceRequest, encode: Encoder
) -> bytes:
    """One event per response, together: the responses that were ready at once
    go in one body message (one write)."""
    return b"".join([event(encode(response, request)) for response in responses])


async def run_until_disconnect(work: Coroutine[Any, Any, None], receive: Receive) -> bool:
    """Run ``work`` unless the client disconnects first, then cancel it (its
    ``finally`` blocks run: the model's generator stops). Whether the client left.

    ``receive`` must have given the whole body already: from then on, the only
    message it has left to give is ``http.disconnect``."""
    running = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait((running, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not running.done():
            running.cancel()
            await asyncio.wait((running,))  # its cleanup has run once this returns
    if running.cancelled():
        return True
    running.result()  # re-raises a bug of ours
    return False


async def _send_chunk(send: Send, chunk: bytes) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


class _StartWatch:
    """A ``send`` that remembers whether the answer has started."""

    __slots__ = ("_send", "started")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)
