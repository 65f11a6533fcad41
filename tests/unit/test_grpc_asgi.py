"""gRPC over ASGI (server/grpc/asgi.py): framing, trailers, limits, deadlines and
compression, driven with ASGI messages (no HTTP/2 server needed)."""

from __future__ import annotations

import asyncio
import gzip
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from inferd.server.grpc.asgi import (
    AsgiCall,
    GrpcAsgi,
    Method,
    grpc_timeout,
)

PATH = "/test.Service/Echo"
STREAM_PATH = "/test.Service/Stream"


def frame(data: bytes, compressed: bool = False) -> bytes:
    return struct.pack(">BI", int(compressed), len(data)) + data


async def echo(request: bytes, call: AsgiCall) -> bytes:
    if request == b"abort":
        await call.abort(grpc.StatusCode.NOT_FOUND, "no such thing: é 100%")
    if request == b"slow":
        await asyncio.sleep(5)
    metadata = dict(call.invocation_metadata())
    call.set_trailing_metadata([("seen-bin", metadata.get("key-bin", b"")), ("plain", "yes")])
    return b"echo:" + request


async def stream(requests: AsyncIterator[bytes], call: AsgiCall) -> AsyncIterator[bytes]:
    async for request in requests:
        yield b"one:" + request
        yield b"two:" + request


def app(limit: int = 1000) -> GrpcAsgi:
    identity = bytes
    table = {
        PATH: Method(echo, identity, identity, False),
        STREAM_PATH: Method(stream, identity, identity, True),
    }
    return GrpcAsgi(table, limit)


def call(
    body_chunks: list[bytes],
    path: str = PATH,
    headers: list[tuple[bytes, bytes]] | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """Run one request through the app; every message it sent."""
    events = [
        {"type": "http.request", "body": chunk, "more_body": i < len(body_chunks) - 1}
        for i, chunk in enumerate(body_chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return events.pop(0) if events else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(b"content-type", b"application/grpc"), *(headers or [])],
    }
    asyncio.run(app(limit)(scope, receive, send))
    return sent


def trailers(sent: list[dict[str, Any]]) -> dict[bytes, bytes]:
    assert sent[-1]["type"] == "http.response.trailers"
    return dict(sent[-1]["headers"])


def body(sent: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_unary_call_is_answered_framed_with_status_and_trailing_metadata() -> None:
    sent = call([frame(b"hi")[:3], frame(b"hi")[3:]], headers=[(b"key-bin", b"AAE")])
    assert sent[0]["status"] == 200 and sent[0]["trailers"] is True
    assert body(sent) == frame(b"echo:hi")
    got = trailers(sent)
    assert got[b"grpc-status"] == b"0"
    assert got[b"seen-bin"] == b"AAE"  # bytes metadata read and sent base64, unpadded
    assert got[b"plain"] == b"yes"


def test_an_abort_ends_the_call_with_its_code_and_a_percent_encoded_message() -> None:
    got = trailers(call([frame(b"abort")]))
    assert got[b"grpc-status"] == str(grpc.StatusCode.NOT_FOUND.value[0]).encode()
    assert got[b"grpc-message"] == b"no such thing: %C3%A9 100%25"


def test_an_unknown_method_is_unimplemented() -> None:
    got = trailers(call([frame(b"x")], path="/nope.Service/Method"))
    assert got[b"grpc-status"] == b"12"
    assert b"/nope.Service/Method" in got[b"grpc-message"]


def test_a_message_over_the_limit_is_refused_from_its_header() -> None:
    got = trailers(call([struct.pack(">BI", 0, 5000)], limit=1000))
    assert got[b"grpc-status"] == b"8"  # RESOURCE_EXHAUSTED, without reading the rest
    assert b"5000 vs. 1000" in got[b"grpc-message"]


@pytest.mark.parametrize(
    ("encoding", "pack"), [(b"gzip", gzip.compress), (b"deflate", zlib.compress)]
)
def test_gzip_and_deflate_requests_are_read(encoding: bytes, pack: Any) -> None:
    sent = call([frame(pack(b"packed"), compressed=True)], headers=[(b"grpc-encoding", encoding)])
    assert body(sent) == frame(b"echo:packed")


def test_a_compressed_message_is_checked_against_the_limit_once_inflated() -> None:
    packed = gzip.compress(b"x" * 5000)
    got = trailers(call([frame(packed, compressed=True)], headers=[(b"grpc-encoding", b"gzip")]))
    assert got[b"grpc-status"] == b"8"


def test_an_encoding_it_does_not_read_is_unimplemented_and_says_which_it_reads() -> None:
    headers = [(b"grpc-encoding", b"snappy")]
    sent = call([frame(b"??", compressed=True)], headers=headers)
    got = trailers(sent)
    assert got[b"grpc-status"] == b"12"
    assert dict(sent[0]["headers"])[b"grpc-accept-encoding"] == b"identity,deflate,gzip"


def test_the_deadline_ends_a_slow_call() -> None:
    got = trailers(call([frame(b"slow")], headers=[(b"grpc-timeout", b"50m")]))
    assert got[b"grpc-status"] == b"4"  # DEADLINE_EXCEEDED


@pytest.mark.parametrize(
    ("header", "seconds"), [(b"2S", 2.0), (b"150m", 0.15), (b"1H", 3600.0), (b"7u", 7e-6)]
)
def test_grpc_timeout_units(header: bytes, seconds: float) -> None:
    assert grpc_timeout(header) == pytest.approx(seconds)


def test_a_malformed_grpc_timeout_is_invalid_argument() -> None:
    got = trailers(call([frame(b"x")], headers=[(b"grpc-timeout", b"soon")]))
    assert got[b"grpc-status"] == b"3"


def test_a_unary_call_without_its_message_is_refused() -> None:
    assert trailers(call([b""]))[b"grpc-status"] == b"13"
    assert trailers(call([frame(b"x")[:4]]))[b"grpc-status"] == b"13"  # cut inside a frame


def test_a_stream_answers_each_request_as_it_is_read() -> None:
    sent = call([frame(b"a") + frame(b"b")[:2], frame(b"b")[2:]], path=STREAM_PATH)
    expected = b"".join(frame(m) for m in (b"one:a", b"two:a", b"one:b", b"two:b"))
    assert body(sent) == expected
    assert trailers(sent)[b"grpc-status"] == b"0"


def test_a_request_that_is_not_grpc_is_refused_with_415() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}"}

    scope = {"type": "http", "method": "POST", "path": PATH, "headers": []}
    asyncio.run(app()(scope, receive, send))
    assert sent[0]["status"] == 415
