"""The streaming load's readers: SSE out of chunked HTTP, gRPC answers, stream checks."""

from __future__ import annotations

import json

import pytest

from benchmarks.streamwire import (
    SseReader,
    StreamError,
    grpc_reader,
    sse_value,
    stream_problem,
)
from inferd.protocol import pb

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def event(value: int) -> bytes:
    answer = {"model_name": "count", "outputs": [{"name": "i", "datatype": "INT32",
                                                  "shape": [1], "data": [value]}]}  # fmt: skip
    return b"data: " + json.dumps(answer).encode() + b"\n\n"


def chunk(data: bytes, extension: bytes = b"") -> bytes:
    return b"%x%s\r\n%s\r\n" % (len(data), extension, data)


LAST_CHUNK = b"0\r\n\r\n"


def answer(*values: int) -> bytes:
    return HEAD + b"".join(chunk(event(v)) for v in values) + LAST_CHUNK


def values_of(reader: SseReader, pieces: list[bytes]) -> list[int]:
    return [sse_value(data) for piece in pieces for data in reader.feed(piece)]


def test_events_come_out_whole_however_the_bytes_are_cut() -> None:
    raw = answer(0, 1, 2)
    for cut in range(1, len(raw)):
        reader = SseReader()
        assert values_of(reader, [raw[:cut], raw[cut:]]) == [0, 1, 2]
        assert reader.done


def test_one_byte_at_a_time_and_events_split_across_chunks() -> None:
    body = event(0) + event(1)
    raw = HEAD + chunk(body[:7]) + chunk(body[7:30], b";ext=1") + chunk(body[30:]) + LAST_CHUNK
    reader = SseReader()
    assert values_of(reader, [raw[i : i + 1] for i in range(len(raw))]) == [0, 1]
    assert reader.done


def test_a_keep_alive_connection_reads_answer_after_answer() -> None:
    reader = SseReader()
    assert values_of(reader, [answer(0, 1)]) == [0, 1]
    with pytest.raises(StreamError, match="after the end"):
        reader.feed(b"x")
    reader.next_answer()
    assert not reader.done
    assert values_of(reader, [answer(0)]) == [0]


def test_the_answer_is_not_done_before_its_last_chunk() -> None:
    reader = SseReader()
    assert values_of(reader, [HEAD + chunk(event(0))]) == [0]
    assert not reader.done
    assert reader.feed(LAST_CHUNK) == []
    assert reader.done


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}", "404"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}", "not a chunked answer"),
        (HEAD + chunk(b"event: error\ndata: {}\n\n") + LAST_CHUNK, "not a data event"),
        (HEAD + chunk(event(0) + b"data: {") + LAST_CHUNK, "bytes after the last event"),
    ],
)
def test_wrong_answers_are_stream_errors(raw: bytes, message: str) -> None:
    with pytest.raises(StreamError, match=message):
        SseReader().feed(raw)


def test_an_error_event_is_not_a_value() -> None:
    assert sse_value(event(7)[6:-2]) == 7
    with pytest.raises(StreamError, match="not a response of the count model"):
        sse_value(b'{"error": "the model failed"}')


def infer_response(value: int, raw: bool = False) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name="count")
    output = response.outputs.add(name="i", datatype="INT32", shape=[1])
    if raw:
        response.raw_output_contents.append(value.to_bytes(4, "little", signed=True))
    else:
        output.contents.int_contents.append(value)
    return response


def wrapped(response: pb.ModelInferResponse, error: str = "") -> bytes:
    return pb.ModelStreamInferResponse(
        error_message=error, infer_response=response
    ).SerializeToString()


def test_grpc_answers_wrapped_or_bare_typed_or_raw() -> None:
    read_wrapped, read_bare = grpc_reader(True), grpc_reader(False)
    assert read_wrapped(wrapped(infer_response(5))) == 5
    assert read_wrapped(wrapped(infer_response(-3, raw=True))) == -3
    assert read_bare(infer_response(9).SerializeToString()) == 9
    assert read_bare(infer_response(70_000, raw=True).SerializeToString()) == 70_000


def test_the_empty_final_response_reads_as_none_and_errors_raise() -> None:
    read = grpc_reader(True)
    final = pb.ModelInferResponse(model_name="count")
    final.parameters["triton_final_response"].bool_param = True
    assert read(wrapped(final)) is None
    with pytest.raises(StreamError, match="without outputs"):
        read(wrapped(pb.ModelInferResponse(model_name="count")))
    with pytest.raises(StreamError, match="the model failed"):
        read(wrapped(pb.ModelInferResponse(), error="the model failed"))
    no_value = pb.ModelInferResponse()
    no_value.outputs.add(name="i", datatype="INT32", shape=[0])
    with pytest.raises(StreamError, match="not a response of the count model"):
        read(wrapped(no_value))


@pytest.mark.parametrize(
    ("values", "finals", "problem"),
    [
        ([0, 1, 2, 3], 0, None),
        ([0, 1, 2, 3], 1, None),
        ([0, 1, 2, 3], 2, "2 final responses"),
        ([0, 1, 2], 0, "3 responses, not 4"),
        ([0, 1, 2, 3, 4], 0, "5 responses, not 4"),
        ([0, 1, 1, 2, 3], 0, "duplicated responses [1] (5 of 4)"),
        ([0, 2, 2, 3], 0, "duplicated responses [2] (4 of 4)"),
        ([0, 2, 1, 3], 0, "out of order: response 1 is 2, not 1"),
        ([], 0, "0 responses, not 4"),
    ],
)
def test_what_is_wrong_with_a_stream(values: list[int], finals: int, problem: str | None) -> None:
    assert stream_problem(values, range(4), finals) == problem
