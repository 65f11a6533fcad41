"""Compression of inference answers (server/rest/compression.py): which answers, which coding."""

from __future__ import annotations

import gzip
import zlib

import pytest

from inferd.server.rest.compression import (
    MINIMUM_SIZE,
    THREAD_MINIMUM_SIZE,
    chosen_coding,
    compress_answer,
)

pytestmark = pytest.mark.anyio

LARGE = b"x" * MINIMUM_SIZE


async def test_large_answers_are_compressed_as_asked() -> None:
    headers: list[tuple[bytes, bytes]] = []
    body = await compress_answer(LARGE, b"gzip", headers)
    assert gzip.decompress(body) == LARGE
    assert headers == [(b"vary", b"Accept-Encoding"), (b"content-encoding", b"gzip")]
    headers = []
    body = await compress_answer(LARGE, b"deflate", headers)
    assert zlib.decompress(body) == LARGE  # zlib's format, as HTTP's deflate means
    assert headers == [(b"vary", b"Accept-Encoding"), (b"content-encoding", b"deflate")]


async def test_answers_large_enough_for_a_thread_come_back_the_same() -> None:
    large = bytes(range(256)) * (THREAD_MINIMUM_SIZE // 256)
    headers: list[tuple[bytes, bytes]] = []
    assert gzip.decompress(await compress_answer(large, b"gzip", headers)) == large


async def test_small_answers_pass_unchanged() -> None:
    headers: list[tuple[bytes, bytes]] = []
    assert await compress_answer(LARGE[:-1], b"gzip", headers) == LARGE[:-1]
    assert headers == []


@pytest.mark.parametrize("accept", [None, b"identity", b"gzip;q=0", b"br"])
async def test_answers_for_clients_that_refuse_pass_unchanged_with_vary(
    accept: bytes | None,
) -> None:
    headers: list[tuple[bytes, bytes]] = []
    assert await compress_answer(LARGE, accept, headers) == LARGE
    assert headers == [(b"vary", b"Accept-Encoding")]  # it would differ for another client


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        (b"gzip", b"gzip"),
        (b"deflate", b"deflate"),
        (b"gzip, deflate", b"gzip"),  # aiohttp's default: the first at the same quality
        (b"deflate, GZIP;q=0.5", b"deflate"),
        (b"deflate;q=0.2, gzip;q=0.5", b"gzip"),
        (b"gzip;q=0", None),
        (b"gzip; q=0.0, deflate;q=0", None),
        (b"gzip;q=nope", None),
        (b"identity", None),
        (b"*", None),
        (b"br, zstd", None),
    ],
)
def test_which_coding_a_client_gets(accept: bytes, coding: bytes | None) -> None:
    assert chosen_coding(accept) == coding
