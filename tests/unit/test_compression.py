"""gzip for REST answers (server/rest/compression.py): which answers, and which clients."""

from __future__ import annotations

import gzip
from typing import Any

import pytest

from inferd.server.rest.compression import (
    GZIP_MINIMUM_SIZE,
    GZIP_THREAD_MINIMUM_SIZE,
    GzipSend,
    accepts_gzip,
)

pytestmark = pytest.mark.anyio

LARGE = b"x" * GZIP_MINIMUM_SIZE


async def answer(
    body: bytes, accept: bytes | None = b"gzip", headers: list[tuple[bytes, bytes]] | None = None
) -> list[dict[str, Any]]:
    """What the server sends when an app answers ``body`` in one message."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    request = [(b"accept-encoding", accept)] if accept is not None else []
    gzip_send = GzipSend(send, request)
    start_headers = [(b"content-length", str(len(body)).encode()), *(headers or [])]
    await gzip_send({"type": "http.response.start", "status": 200, "headers": start_headers})
    await gzip_send({"type": "http.response.body", "body": body})
    return sent


async def test_large_answers_are_compressed_with_their_length() -> None:
    start, body = await answer(LARGE)
    assert gzip.decompress(body["body"]) == LARGE
    assert start["headers"] == [
        (b"vary", b"Accept-Encoding"),
        (b"content-encoding", b"gzip"),
        (b"content-length", str(len(body["body"])).encode()),
    ]


async def test_answers_large_enough_for_a_thread_come_back_the_same() -> None:
    large = bytes(range(256)) * (GZIP_THREAD_MINIMUM_SIZE // 256)
    start, body = await answer(large)
    assert gzip.decompress(body["body"]) == large
    assert (b"content-length", str(len(body["body"])).encode()) in start["headers"]


async def test_images_pass_unchanged() -> None:
    start, body = await answer(LARGE, headers=[(b"content-type", b"image/png")])
    assert body["body"] == LARGE
    assert start["headers"] == [(b"content-length", b"1024"), (b"content-type", b"image/png")]


async def test_small_answers_pass_unchanged() -> None:
    start, body = await answer(LARGE[:-1])
    assert body["body"] == LARGE[:-1]
    assert start["headers"] == [(b"content-length", b"1023")]


async def test_vary_is_added_to_the_one_there() -> None:
    start, _ = await answer(LARGE, accept=None, headers=[(b"vary", b"Origin")])
    assert start["headers"] == [(b"content-length", b"1024"), (b"vary", b"Origin, Accept-Encoding")]


async def test_encoded_answers_and_streams_pass_unchanged() -> None:
    encoded = [(b"content-encoding", b"br")]
    start, body = await answer(LARGE, headers=encoded)
    assert body["body"] == LARGE and (b"content-encoding", b"br") in start["headers"]
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    stream = GzipSend(send, [(b"accept-encoding", b"gzip")])
    await stream({"type": "http.response.start", "status": 200, "headers": []})
    await stream({"type": "http.response.body", "body": LARGE, "more_body": True})
    await stream({"type": "http.response.body", "body": LARGE})
    assert [m.get("body") for m in sent] == [None, LARGE, LARGE]
    assert sent[0]["headers"] == []


@pytest.mark.parametrize(
    ("accept", "accepted"),
    [
        (b"gzip", True),
        (b"deflate, GZIP;q=0.5", True),
        (b"gzip;q=0", False),
        (b"gzip; q=0.0", False),
        (b"gzip;q=nope", False),
        (b"identity", False),
        (b"*", False),
    ],
)
def test_which_clients_accept_gzip(accept: bytes, accepted: bool) -> None:
    assert accepts_gzip([(b"accept-encoding", accept)]) is accepted
