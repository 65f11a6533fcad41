"""The streaming load's bare HTTP/2 gRPC client: encoding, framing, one connection's calls."""

from __future__ import annotations

import asyncio
import struct

import pytest

from benchmarks.h2grpc import (
    ACK,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    WINDOW_UPDATE,
    FrameReader,
    H2Error,
    H2GrpcConnection,
    MessageReader,
    connection_start,
    frame,
    grpc_message,
    hpack_int,
    request_headers,
    unpadded,
)

# The HPACK static table entries a gRPC request uses (RFC 7541, appendix A).
STATIC = {1: (":authority", ""), 3: (":method", "POST"), 4: (":path", "/"),
          6: (":scheme", "http"), 31: ("content-type", "")}  # fmt: skip
PATH = "/inference.GRPCInferenceService/ModelStreamInfer"


def read_int(block: bytes, position: int, prefix_bits: int) -> tuple[int, int]:
    limit = (1 << prefix_bits) - 1
    value = block[position] & limit
    position += 1
    if value < limit:
        return value, position
    shift = 0
    while True:
        byte = block[position]
        position += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def read_string(block: bytes, position: int) -> tuple[str, int]:
    assert not block[position] & 0x80  # no Huffman coding
    size, position = read_int(block, position, 7)
    return block[position : position + size].decode(), position + size


def decode_literal_block(block: bytes) -> list[tuple[str, str]]:
    """Indexed static fields and literals without indexing: all a request block holds."""
    fields, position = [], 0
    while position < len(block):
        if block[position] & 0x80:
            index, position = read_int(block, position, 7)
            fields.append(STATIC[index])
            continue
        assert block[position] & 0xF0 == 0  # literal without indexing: nothing is stored
        index, position = read_int(block, position, 4)
        name, position = (STATIC[index][0], position) if index else read_string(block, position)
        value, position = read_string(block, position)
        fields.append((name, value))
    return fields


def test_hpack_integers_as_rfc_7541_encodes_them() -> None:
    assert hpack_int(10, 5) == b"\x0a"
    assert hpack_int(1337, 5) == b"\x1f\x9a\x0a"
    assert hpack_int(42, 8) == b"\x2a"
    assert hpack_int(31, 4) == b"\x0f\x10"
    assert hpack_int(3, 7, 0x80) == b"\x83"


def test_the_request_header_block_is_a_grpc_call() -> None:
    fields = decode_literal_block(request_headers("127.0.0.1:8081", PATH))
    assert fields == [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", PATH),
        (":authority", "127.0.0.1:8081"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


def test_long_values_take_multi_byte_lengths() -> None:
    long_path = "/" + "p" * 300
    assert (":path", long_path) in decode_literal_block(request_headers("h:1", long_path))


def test_the_connection_opens_with_the_preface_settings_and_a_wide_window() -> None:
    start = connection_start()
    assert start.startswith(PREFACE)
    settings, window = FrameReader().feed(start[len(PREFACE) :])
    assert settings[:3] == (SETTINGS, 0, 0)
    assert dict(struct.iter_unpack(">HI", settings[3]))[SETTINGS_INITIAL_WINDOW_SIZE] == MAX_WINDOW
    assert window[:3] == (WINDOW_UPDATE, 0, 0)
    assert struct.unpack(">I", window[3])[0] + 65_535 == MAX_WINDOW


def test_frames_come_out_whole_however_the_bytes_are_cut() -> None:
    big = bytes(range(256)) * 300  # over 64 KiB: the length's high byte counts
    raw = (
        frame(DATA, END_STREAM, 3, b"abc") + frame(PING, 0, 0, b"12345678") + frame(DATA, 0, 5, big)
    )
    expected = [(DATA, END_STREAM, 3, b"abc"), (PING, 0, 0, b"12345678"), (DATA, 0, 5, big)]
    for cut in (1, 5, 9, 12, 13, 20, len(raw) - 1):
        reader = FrameReader()
        assert reader.feed(raw[:cut]) + reader.feed(raw[cut:]) == expected


def test_padding_is_dropped() -> None:
    assert unpadded(PADDED, b"\x02hello\x00\x00") == b"hello"
    assert unpadded(0, b"hello") == b"hello"


def test_grpc_messages_split_across_frames_anywhere() -> None:
    data = grpc_message(b"one") + grpc_message(b"") + grpc_message(b"three" * 100)
    for cut in range(len(data)):
        reader = MessageReader()
        assert reader.feed(data[:cut]) + reader.feed(data[cut:]) == [b"one", b"", b"three" * 100]
        assert reader.empty
    reader = MessageReader()
    assert reader.feed(data[:4]) == [] and not reader.empty


def test_a_compressed_message_is_refused() -> None:
    with pytest.raises(H2Error, match="compressed"):
        MessageReader().feed(b"\x01" + struct.pack(">I", 1) + b"x")


class FakeTransport:
    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        sent, self.written = self.written, b""
        return FrameReader().feed(sent.removeprefix(connection_start()))


def connected() -> tuple[H2GrpcConnection, FakeTransport]:
    connection, transport = H2GrpcConnection("127.0.0.1:1", PATH), FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def settings(**values: int) -> bytes:
    keys = {"max_streams": SETTINGS_MAX_CONCURRENT_STREAMS, "window": SETTINGS_INITIAL_WINDOW_SIZE}
    return frame(
        SETTINGS, 0, 0, b"".join(struct.pack(">HI", keys[k], v) for k, v in values.items())
    )


async def started(connection: H2GrpcConnection, message: bytes) -> asyncio.Task[object]:
    task = asyncio.create_task(connection.call(message))
    await asyncio.sleep(0)
    return task  # type: ignore[return-value]


@pytest.mark.anyio
async def test_a_call_sends_headers_and_its_message_then_reads_every_answer() -> None:
    connection, transport = connected()
    call = await started(connection, b"request")
    assert transport.frames() == [
        (HEADERS, END_HEADERS, 1, request_headers("127.0.0.1:1", PATH)),
        (DATA, END_STREAM, 1, grpc_message(b"request")),
    ]
    answers = grpc_message(b"a") + grpc_message(b"b")
    connection.data_received(frame(DATA, 0, 1, answers[:4]) + frame(DATA, 0, 1, answers[4:]))
    assert not call.done()
    connection.data_received(frame(HEADERS, END_HEADERS | END_STREAM, 1, b"\x88"))
    result = await call
    assert result.messages == [b"a", b"b"]  # type: ignore[attr-defined]
    assert result.first_at > 0  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_concurrent_calls_get_their_own_answers() -> None:
    connection, transport = connected()
    first, second = await started(connection, b"1"), await started(connection, b"2")
    assert [f[2] for f in transport.frames()] == [1, 1, 3, 3]
    connection.data_received(
        frame(DATA, 0, 3, grpc_message(b"x3")) + frame(DATA, 0, 1, grpc_message(b"x1"))
        + frame(DATA, END_STREAM, 3, b"") + frame(DATA, END_STREAM, 1, grpc_message(b"y1"))
    )  # fmt: skip
    assert (await first).messages == [b"x1", b"y1"]  # type: ignore[attr-defined]
    assert (await second).messages == [b"x3"]  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_settings_and_pings_are_acknowledged_and_windows_given_back() -> None:
    connection, transport = connected()
    connection.data_received(settings(max_streams=100) + frame(PING, 0, 0, b"pingpong"))
    assert transport.frames() == [(SETTINGS, ACK, 0, b""), (PING, ACK, 0, b"pingpong")]
    assert connection.max_streams == 100
    connection.received = MAX_WINDOW // 2
    connection.data_received(frame(DATA, 0, 9, b"1234"))  # a stream already gone
    assert transport.frames() == [(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW // 2 + 4))]


@pytest.mark.anyio
async def test_a_call_waits_for_the_connection_window() -> None:
    connection, transport = connected()
    connection.send_window = 3
    call = await started(connection, b"request")
    assert transport.frames() == []
    connection.data_received(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 100)))
    await asyncio.sleep(0)
    assert [f[0] for f in transport.frames()] == [HEADERS, DATA]
    call.cancel()


@pytest.mark.anyio
async def test_a_reset_stream_fails_its_call_only() -> None:
    connection, _ = connected()
    first, second = await started(connection, b"1"), await started(connection, b"2")
    connection.data_received(frame(RST_STREAM, 0, 1, struct.pack(">I", 2)))
    with pytest.raises(H2Error, match="stream 1 reset"):
        await first
    connection.data_received(frame(DATA, END_STREAM, 3, grpc_message(b"ok")))
    assert (await second).messages == [b"ok"]  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_goaway_or_a_lost_connection_fails_every_call() -> None:
    connection, transport = connected()
    call = await started(connection, b"1")
    connection.data_received(frame(GOAWAY, 0, 0, struct.pack(">II", 1, 0) + b"bye"))
    with pytest.raises(H2Error, match="GOAWAY"):
        await call
    assert transport.closed
    with pytest.raises(H2Error, match="GOAWAY"):
        await connection.call(b"2")

    connection, _ = connected()
    call = await started(connection, b"1")
    connection.connection_lost(None)
    with pytest.raises(H2Error, match="connection closed"):
        await call


@pytest.mark.anyio
async def test_server_limits_are_kept() -> None:
    connection, _ = connected()
    connection.data_received(settings(max_streams=1))
    call = await started(connection, b"1")
    with pytest.raises(H2Error, match="more concurrent calls"):
        await connection.call(b"2")
    call.cancel()
    connection, _ = connected()
    call = await started(connection, b"1")
    connection.data_received(settings(window=10))
    with pytest.raises(H2Error, match="stream window"):
        await call


@pytest.mark.anyio
async def test_a_stream_ending_inside_a_message_fails() -> None:
    connection, _ = connected()
    call = await started(connection, b"1")
    connection.data_received(frame(DATA, END_STREAM, 1, grpc_message(b"whole")[:-1]))
    with pytest.raises(H2Error, match="inside a gRPC message"):
        await call
