"""Reading request bodies: size limit, gzip/deflate, zip-bomb guard."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Mapping

from inferd.errors import InvalidRequest, PayloadTooLarge


class BodyReader:
    """Reads whole request bodies of at most ``limit`` bytes (after decompression)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    async def read(self, chunks: AsyncIterator[bytes], headers: Mapping[str, str]) -> bytes:
        """The body from ``chunks``; ``headers`` needs content-length and content-encoding."""
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            raise PayloadTooLarge(self._too_large())
        body = await self._collect(chunks)
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("", "identity"):
            return body
        return self._decompress(body, encoding)

    async def _collect(self, chunks: AsyncIterator[bytes]) -> bytes:
        first = b""
        rest: list[bytes] = []
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > self.limit:
                raise PayloadTooLarge(self._too_large())
            if not first:
                first = chunk
            else:
                rest.append(chunk)
        # Most bodies arrive in one chunk: return it without copying.
        return b"".join([first, *rest]) if rest else first

    def _decompress(self, body: bytes, encoding: str) -> bytes:
        """gzip (every member, RFC 1952) or deflate, refusing to inflate past the
        limit (a zip bomb guard) and refusing bytes after the compressed data."""
        if encoding == "gzip":
            wbits = 16 + zlib.MAX_WBITS
        elif encoding == "deflate":
            wbits = zlib.MAX_WBITS
        else:
            raise InvalidRequest(f"Unsupported Content-Encoding {encoding!r}; use gzip or deflate")
        parts: list[bytes] = []
        size = 0
        remaining = body
        while True:
            inflater = zlib.decompressobj(wbits)
            try:
                # At least 1: a max_length of 0 would mean no limit at all.
                parts.append(inflater.decompress(remaining, self.limit + 1 - size))
            except zlib.error as error:
                raise InvalidRequest(f"The body is not valid {encoding} data: {error}") from None
            size += len(parts[-1])
            if size > self.limit or inflater.unconsumed_tail:
                raise PayloadTooLarge(self._too_large() + " once decompressed")
            if not inflater.eof:
                raise InvalidRequest(f"The body is truncated {encoding} data")
            remaining = inflater.unused_data
            if not remaining:
                return b"".join(parts)  # one member, the usual case: no copy
            if encoding == "deflate":  # one stream only; gzip may hold several members
                raise InvalidRequest(f"The body has {len(remaining)} bytes after its deflate data")

    def _too_large(self) -> str:
        return f"The request body is larger than max_request_size ({self.limit} bytes)"
