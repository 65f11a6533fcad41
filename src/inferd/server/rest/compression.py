"""Compression of REST inference answers: the one place that compresses them.

Triton compresses an inference answer, and nothing else, as the request's
Accept-Encoding asks (gzip or deflate); we do the same. Compressing every answer
of 1 KiB or more (statistics, metadata, the OpenAPI document) broke
``tritonclient.http.aio``: it turns aiohttp's automatic decompression off, and
aiohttp still sends ``Accept-Encoding: gzip, deflate``, so it read gzip bytes as
JSON. Its inference calls decompress what Content-Encoding says, as Triton's
clients must.

:func:`compress_answer` is called by the inference endpoint
(server/rest/fastpath.py) on a successful answer's bytes. An answer of at least
:data:`MINIMUM_SIZE` bytes gets ``Vary: Accept-Encoding`` (it would differ for
another client) and is compressed with the coding the client prefers among gzip
and deflate (a quality of 0 refuses one; ``deflate`` is zlib's format, as HTTP
and tritonclient mean it). Smaller answers are sent as they are: compressing them
costs more than it saves. Bodies from :data:`THREAD_MINIMUM_SIZE` up are
compressed in a thread (zlib lets go of the GIL), so that one large answer does
not hold up every other request on the loop.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib

MINIMUM_SIZE = 1024
LEVEL = 6
THREAD_MINIMUM_SIZE = 128 * 1024  # as Starlette's GZipMiddleware
_VARY = (b"vary", b"Accept-Encoding")


async def compress_answer(
    body: bytes, accept_encoding: bytes | None, headers: list[tuple[bytes, bytes]]
) -> bytes:
    """``body`` as it goes out: compressed when it is large enough and the client
    accepts gzip or deflate; ``headers`` get Vary and Content-Encoding to match."""
    if len(body) < MINIMUM_SIZE:
        return body
    headers.append(_VARY)
    coding = chosen_coding(accept_encoding) if accept_encoding else None
    if coding is None:
        return body
    compress = _gzip if coding == b"gzip" else _deflate
    if len(body) < THREAD_MINIMUM_SIZE:
        body = compress(body)
    else:
        body = await asyncio.to_thread(compress, body)
    headers.append((b"content-encoding", coding))
    return body


def _gzip(body: bytes) -> bytes:
    return gzip.compress(body, LEVEL)


def _deflate(body: bytes) -> bytes:
    return zlib.compress(body, LEVEL)


def chosen_coding(accept_encoding: bytes) -> bytes | None:
    """gzip or deflate, whichever Accept-Encoding prefers (the first listed at the
    same quality); None when it lists neither with a quality above 0."""
    best: bytes | None = None
    best_quality = 0.0
    for coding in accept_encoding.split(b","):
        name, _, parameters = coding.partition(b";")
        name = name.strip().lower()
        if name not in (b"gzip", b"deflate"):
            continue
        quality = _quality(parameters.strip().lower())
        if quality > best_quality:
            best, best_quality = name, quality
    return best


def _quality(parameters: bytes) -> float:
    if not parameters:
        return 1.0
    try:
        return float(parameters.removeprefix(b"q="))
    except ValueError:
        return 0.0  # a malformed quality: do not guess
