"""gRPC streaming calls over a bare HTTP/2 connection: the cheap side of the streaming load.

grpcio's Python client costs 100-150 us of CPU per streamed message here (more than
the servers it measures spend on it, on a machine where they share two cores), so the
load speaks HTTP/2 itself: request headers HPACK-encoded once (literals only, no
dynamic table, so the same bytes serve every call), frames split with one ``struct``
call each, flow control opened wide once. What it reads is only what a stream needs:
DATA (the gRPC messages, in order) and END_STREAM. Header blocks are not decoded, so
``grpc-status`` is not read: a call that fails carries fewer messages than asked (none
for a trailers-only error), which the stream's count check catches. The scenario checks
each server's answer with grpcio first, status included.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass, field

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM = ACK = 0x1
END_HEADERS, PADDED = 0x4, 0x8
SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE = 2, 3, 4
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
FRAME_HEAD = struct.Struct(">BHBBI")  # 24-bit length as 8 + 16 bits, type, flags, stream id
GRPC_PREFIX = struct.Struct(">BI")  # compressed flag, message length


class H2Error(Exception):
    """The connection or one of its streams failed."""


# ------------------------------------------------------------------- encoding


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer with an N-bit prefix, ``first`` holding the bits above it."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out, value = bytearray([first | limit]), value - limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_string(text: str) -> bytes:
    raw = text.encode()
    return hpack_int(len(raw), 7) + raw  # no Huffman coding


def request_headers(authority: str, path: str) -> bytes:
    """The header block of a gRPC call: static-table names, literal values, nothing
    added to the dynamic table (so the block is the same for every call)."""
    return (
        b"\x83"  # :method POST (static 3)
        + b"\x86"  # :scheme http (static 6)
        + hpack_int(4, 4) + hpack_string(path)  # :path, literal without indexing
        + hpack_int(1, 4) + hpack_string(authority)  # :authority
        + hpack_int(31, 4) + hpack_string("application/grpc")  # content-type
        + b"\x00" + hpack_string("te") + hpack_string("trailers")
    )  # fmt: skip


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return FRAME_HEAD.pack(size >> 16, size & 0xFFFF, kind, flags, stream_id) + payload


def grpc_message(message: bytes) -> bytes:
    return GRPC_PREFIX.pack(0, len(message)) + message


def connection_start() -> bytes:
    """Preface, our settings (no push; stream windows at the maximum) and the whole
    connection window, so a server never waits for the load to open it."""
    settings = struct.pack(
        ">HIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW
    )
    opening = struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)
    return PREFACE + frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, opening)


# ------------------------------------------------------------------- decoding


class FrameReader:
    """Splits received bytes into frames: ``feed`` returns (type, flags, stream id, payload)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[tuple[int, int, int, bytes]]:
        buffer = self._pending + data if self._pending else data
        frames, position, end = [], 0, len(buffer)
        while end - position >= 9:
            high, low, kind, flags, stream_id = FRAME_HEAD.unpack_from(buffer, position)
            start, stop = position + 9, position + 9 + (high << 16 | low)
            if stop > end:
                break
            frames.append((kind, flags, stream_id & MAX_WINDOW, buffer[start:stop]))
            position = stop
        self._pending = buffer[position:]
        return frames


def unpadded(flags: int, payload: bytes) -> bytes:
    if flags & PADDED:
        return payload[1 : len(payload) - payload[0]]
    return payload


class MessageReader:
    """Splits one stream's DATA into gRPC messages (which frames may cut anywhere)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._pending + data if self._pending else data
        messages, position, end = [], 0, len(buffer)
        while end - position >= 5:
            compressed, size = GRPC_PREFIX.unpack_from(buffer, position)
            if compressed:
                raise H2Error("a compressed gRPC message (none was asked for)")
            if position + 5 + size > end:
                break
            messages.append(buffer[position + 5 : position + 5 + size])
            position += 5 + size
        self._pending = buffer[position:]
        return messages

    @property
    def empty(self) -> bool:
        return not self._pending


# ----------------------------------------------------------------- connection


@dataclass
class CallResult:
    """One call's messages, in order, and when the first came."""

    messages: list[bytes] = field(default_factory=list)
    first_at: float = 0.0


class _Call:
    __slots__ = ("done", "reader", "result")

    def __init__(self, done: asyncio.Future[CallResult]) -> None:
        self.done = done
        self.reader = MessageReader()
        self.result = CallResult()


class H2GrpcConnection(asyncio.Protocol):
    """One HTTP/2 connection carrying any number of concurrent calls of one method,
    each sending one request message and half-closing at once."""

    def __init__(self, authority: str, path: str) -> None:
        self.header_block = request_headers(authority, path)
        self.frames = FrameReader()
        self.calls: dict[int, _Call] = {}
        self.next_stream_id = 1
        self.send_window = DEFAULT_WINDOW  # the connection's, for our DATA
        self.window_opened = asyncio.Event()
        self.received = 0  # DATA bytes since we last gave the window back
        self.max_streams = MAX_WINDOW
        self.transport: asyncio.Transport | None = None
        self.error: H2Error | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        transport.write(connection_start())  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(H2Error(f"connection closed ({exc})"))

    def fail(self, error: H2Error) -> None:
        self.error = self.error or error
        self.transport = None
        for call in self.calls.values():
            if not call.done.done():
                call.done.set_exception(error)
        self.calls.clear()
        self.window_opened.set()

    async def call(self, message: bytes) -> CallResult:
        """One call: ``message`` sent, the stream half-closed, every answer read."""
        body = grpc_message(message)
        while self.transport is not None and self.send_window < len(body):
            self.window_opened.clear()
            await self.window_opened.wait()
        if self.transport is None:
            raise self.error or H2Error("connection closed")
        if len(self.calls) >= self.max_streams:
            raise H2Error(f"more concurrent calls than the server allows ({self.max_streams})")
        stream_id, self.next_stream_id = self.next_stream_id, self.next_stream_id + 2
        done: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()
        self.calls[stream_id] = _Call(done)
        self.send_window -= len(body)
        self.transport.write(
            frame(HEADERS, END_HEADERS, stream_id, self.header_block)
            + frame(DATA, END_STREAM, stream_id, body)
        )
        return await done

    def data_received(self, data: bytes) -> None:
        try:
            for kind, flags, stream_id, payload in self.frames.feed(data):
                if kind == DATA:
                    self._on_data(flags, stream_id, payload)
                elif kind == HEADERS:
                    if flags & END_STREAM:
                        self._end(stream_id)
                else:
                    self._on_control(kind, flags, stream_id, payload)
        except H2Error as error:
            transport = self.transport
            self.fail(error)
            if transport is not None:
                transport.close()

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        self.received += len(payload)
        if self.received > MAX_WINDOW // 2:  # give the connection window back
            assert self.transport is not None
            self.transport.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.received)))
            self.received = 0
        call = self.calls.get(stream_id)
        if call is None:
            return
        messages = call.reader.feed(unpadded(flags, payload))
        if messages:
            result = call.result
            if not result.messages:
                result.first_at = time.perf_counter()
            result.messages.extend(messages)
        if flags & END_STREAM:
            self._end(stream_id)

    def _end(self, stream_id: int) -> None:
        call = self.calls.pop(stream_id, None)
        if call is None:
            return
        if not call.reader.empty:
            call.done.set_exception(H2Error("the stream ended inside a gRPC message"))
        else:
            call.done.set_result(call.result)

    def _on_control(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        transport = self.transport
        assert transport is not None
        if kind == SETTINGS and not flags & ACK:
            self._apply_settings(payload)
            transport.write(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            transport.write(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE and stream_id == 0:
            self.send_window += struct.unpack(">I", payload)[0] & MAX_WINDOW
            self.window_opened.set()
        elif kind == RST_STREAM:
            call = self.calls.pop(stream_id, None)
            code = struct.unpack(">I", payload)[0]
            if call is not None:
                call.done.set_exception(H2Error(f"stream {stream_id} reset (error code {code})"))
        elif kind == GOAWAY:
            last, code = struct.unpack(">II", payload[:8])
            raise H2Error(f"GOAWAY (error code {code}, last stream {last}): {payload[8:]!r}")

    def _apply_settings(self, payload: bytes) -> None:
        for offset in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self.max_streams = value
            elif key == SETTINGS_INITIAL_WINDOW_SIZE and value < 1024:
                # Each call sends one small message on a fresh stream: any usual
                # window holds it; one this small would need per-stream accounting.
                raise H2Error(f"the server's stream window ({value} bytes) is too small")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
