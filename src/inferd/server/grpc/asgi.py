"""gRPC over ASGI: the V2 service and health for an HTTP/2 server that sends trailers.

Envoy through pyvoy (``grpc_transport: "envoy"``, server/envoy_app.py) speaks HTTP/2
in C++ and hands Python one ASGI call per request; this module is the gRPC part that
grpcio does otherwise: the 5-byte message framing, ``grpc-status``/``grpc-message``
trailers, ``grpc-timeout``, the message size limit, and request compression (gzip and
deflate read, others refused with UNIMPLEMENTED, as gRPC says). Each call goes to the
same servicer methods as grpcio's (server/grpc/servicer.py, through the gRPC edge),
with :class:`AsgiCall` as the call: access, counters, spans, errors as status codes
and the size of answers are the edge's, unchanged.

Served: every method of ``inference.GRPCInferenceService`` (``ModelStreamInfer``
full duplex) and ``grpc.health.v1.Health/Check``. Not served: health's ``Watch``
and server reflection (UNIMPLEMENTED).
"""

from __future__ import annotations

import asyncio
import base64
import struct
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from inferd.protocol import pb
from inferd.server.grpc.edge import UNLIMITED
from inferd.server.grpc.health import HealthServicer
from inferd.server.grpc.registration import SERVICE, lenient_deserializer
from inferd.server.grpc.servicer import InferenceServicer

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]

FRAME = struct.Struct(">BI")  # compressed flag, message length
CONTENT_TYPE = b"application/grpc"
ACCEPTED_ENCODINGS = b"identity,deflate,gzip"
_WBITS = {"gzip": 31, "deflate": 15}  # zlib's window bits for each encoding
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_RESERVED = (b":", b"grpc-", b"content-type", b"te", b"user-agent")
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


class CallEnded(grpc.aio.AbortError):
    """The call ends with this status (a refused request, an abort, a deadline)."""

    def __init__(self, code: grpc.StatusCode, details: str, metadata: Iterable[Any] = ()) -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.metadata = tuple(metadata)


class AsgiCall:
    """What the gRPC edge and the servicers use of a call (grpc.aio's context):
    the client's metadata, trailing metadata, and abort."""

    __slots__ = ("_headers", "_metadata", "trailing")

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self._headers = headers
        self._metadata: tuple[tuple[str, str | bytes], ...] | None = None
        self.trailing: tuple[tuple[str, Any], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        if self._metadata is None:  # read only when asked (most calls never are)
            self._metadata = tuple(_metadata(self._headers))
        return self._metadata

    def set_trailing_metadata(self, metadata: Iterable[tuple[str, Any]]) -> None:
        self.trailing = tuple(metadata)

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Iterable[Any] = ()
    ) -> None:
        raise CallEnded(code, details, trailing_metadata)


def _metadata(headers: list[tuple[bytes, bytes]]) -> Iterable[tuple[str, str | bytes]]:
    for key, value in headers:
        if key.startswith(_RESERVED):
            continue
        name = key.decode("latin-1")
        if name.endswith("-bin"):
            yield name, base64.b64decode(value + b"==")  # sent unpadded, as gRPC allows
        else:
            yield name, value.decode("latin-1")


@dataclass(frozen=True, slots=True)
class Method:
    handler: Callable[..., Any]
    parse: Callable[[bytes], Any]
    serialize: Callable[[Any], bytes]
    streaming: bool


def methods(servicer: InferenceServicer, health: HealthServicer) -> dict[str, Method]:
    """Each served method by its path."""
    table = {
        f"/{SERVICE.full_name}/{method.name}": Method(
            getattr(servicer, method.name),
            lenient_deserializer(getattr(pb, method.input_type.name)),
            getattr(pb, method.output_type.name).SerializeToString,
            method.client_streaming,
        )
        for method in SERVICE.methods
    }
    table[HEALTH_CHECK] = Method(
        health.Check,
        health_pb2.HealthCheckRequest.FromString,
        health_pb2.HealthCheckResponse.SerializeToString,
        False,
    )
    return table


class GrpcAsgi:
    """The ASGI app answering gRPC calls (HTTP requests only; lifespan is the caller's)."""

    def __init__(self, table: dict[str, Method], max_message_length: int) -> None:
        self._methods = table
        self._limit = None if max_message_length == UNLIMITED else max_message_length

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = self._methods.get(scope["path"])
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        fields = dict(headers)
        if not fields.get(b"content-type", b"").startswith(CONTENT_TYPE):
            await _plain(send, 415, b"gRPC only here: content-type application/grpc\n")
            return
        call = AsgiCall(headers)
        reader = _Reader(receive, fields.get(b"grpc-encoding", b"identity"), self._limit)
        try:
            deadline = grpc_timeout(fields.get(b"grpc-timeout"))
            if method is None:
                raise CallEnded(grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {scope['path']}")
            if method.streaming:
                await _answer_stream(method, call, reader, send, deadline)
                return
            body = await asyncio.wait_for(_answer(method, call, reader), deadline)
        except CallEnded as ended:
            await _finish(send, [], ended.code, ended.details, (*call.trailing, *ended.metadata))
        except TimeoutError:
            await _finish(send, [], grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", ())
        else:
            await _finish(send, [body], grpc.StatusCode.OK, "", call.trailing)


async def _answer(method: Method, call: AsgiCall, reader: _Reader) -> bytes:
    data = await reader.message()
    if data is None:
        raise CallEnded(grpc.StatusCode.INTERNAL, "The call carried no request message")
    if await reader.message() is not None:
        raise CallEnded(grpc.StatusCode.UNIMPLEMENTED, "A unary call carried several messages")
    try:
        request = method.parse(data)
    except Exception as error:  # health's strict parser: a malformed message
        raise CallEnded(grpc.StatusCode.INVALID_ARGUMENT, f"Malformed request: {error}") from None
    return frame(method.serialize(await method.handler(request, call)))


async def _answer_stream(
    method: Method, call: AsgiCall, reader: _Reader, send: Send, deadline: float | None
) -> None:
    """A bidirectional stream: each request as it arrives, each answer as it is made."""
    await send(_start())
    code, details = grpc.StatusCode.OK, ""
    metadata: tuple[Any, ...] = ()
    answers = method.handler(reader.messages(method.parse), call)
    try:
        async with asyncio.timeout(deadline):
            async for answer in answers:
                data = frame(method.serialize(answer))
                await send({"type": "http.response.body", "body": data, "more_body": True})
    except CallEnded as ended:
        code, details, metadata = ended.code, ended.details, ended.metadata
    except TimeoutError:
        code, details = grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
    finally:
        await answers.aclose()
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    await send(_trailers(code, details, (*call.trailing, *metadata)))


class _Reader:
    """The request's messages, unframed, as the body arrives."""

    def __init__(self, receive: Receive, encoding: bytes, limit: int | None) -> None:
        self._receive = receive
        self._encoding = encoding.decode("latin-1")
        self._limit = limit
        self._buffer = bytearray()
        self._ended = False

    async def message(self) -> bytes | None:
        """The next message, None at the end of the request."""
        while len(self._buffer) < FRAME.size:
            if not await self._more():
                if self._buffer:
                    raise CallEnded(grpc.StatusCode.INTERNAL, "The request ends inside a frame")
                return None
        compressed, length = FRAME.unpack_from(self._buffer)
        self._check(length)
        while len(self._buffer) < FRAME.size + length:
            if not await self._more():
                raise CallEnded(grpc.StatusCode.INTERNAL, "The request ends inside a message")
        data = bytes(self._buffer[FRAME.size : FRAME.size + length])
        del self._buffer[: FRAME.size + length]
        return self._decompressed(data) if compressed else data

    async def messages(self, parse: Callable[[bytes], Any]) -> AsyncIterator[Any]:
        while (data := await self.message()) is not None:
            yield parse(data)

    async def _more(self) -> bool:
        if self._ended:
            return False
        event = await self._receive()
        if event["type"] == "http.disconnect":
            raise asyncio.CancelledError  # the client went away: stop its work
        self._buffer += event.get("body", b"")
        self._ended = not event.get("more_body", False)
        return True

    def _check(self, length: int) -> None:
        if self._limit is not None and length > self._limit:
            raise CallEnded(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({length} vs. {self._limit})",
            )

    def _decompressed(self, data: bytes) -> bytes:
        wbits = _WBITS.get(self._encoding)
        if wbits is None:
            raise CallEnded(
                grpc.StatusCode.UNIMPLEMENTED,
                f"Message compressed with {self._encoding!r}, which this server does not "
                f"read; it reads {ACCEPTED_ENCODINGS.decode()}",
            )
        inflate = zlib.decompressobj(wbits)
        limit = self._limit if self._limit is not None else 0
        try:
            plain = inflate.decompress(data, limit + 1 if limit else 0)
        except zlib.error as error:
            bad = f"Bad {self._encoding} data: {error}"
            raise CallEnded(grpc.StatusCode.INTERNAL, bad) from None
        self._check(len(plain) + (1 if inflate.unconsumed_tail else 0))
        return plain


def grpc_timeout(value: bytes | None) -> float | None:
    """Seconds a ``grpc-timeout`` header gives (None: none); a malformed one is refused."""
    if value is None:
        return None
    text = value.decode("latin-1")
    unit = _TIMEOUT_UNITS.get(text[-1:])
    digits = text[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        raise CallEnded(grpc.StatusCode.INVALID_ARGUMENT, f"Malformed grpc-timeout {text!r}")
    return int(digits) * unit


def frame(message: bytes) -> bytes:
    return FRAME.pack(0, len(message)) + message


def _start() -> dict[str, Any]:
    headers = [(b"content-type", CONTENT_TYPE), (b"grpc-accept-encoding", ACCEPTED_ENCODINGS)]
    return {"type": "http.response.start", "status": 200, "headers": headers, "trailers": True}


def _trailers(code: grpc.StatusCode, details: str, metadata: Iterable[Any]) -> dict[str, Any]:
    headers = [(b"grpc-status", str(code.value[0]).encode())]
    if details:  # percent-encoded, as gRPC's wire format says
        quoted = urllib.parse.quote(details, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
        headers.append((b"grpc-message", quoted.encode("ascii")))
    for key, value in metadata:
        data = base64.b64encode(value).rstrip(b"=") if isinstance(value, bytes) else value.encode()
        headers.append((key.encode("latin-1"), data))
    return {"type": "http.response.trailers", "headers": headers, "more_trailers": False}


async def _finish(
    send: Send, bodies: list[bytes], code: grpc.StatusCode, details: str, metadata: Iterable[Any]
) -> None:
    await send(_start())
    await send({"type": "http.response.body", "body": b"".join(bodies), "more_body": False})
    await send(_trailers(code, details, metadata))


async def _plain(send: Send, status: int, text: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": text})
