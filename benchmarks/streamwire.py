"""What a streaming client reads, kept pure so it is tested without a server.

- :class:`SseReader` takes the raw bytes of HTTP/1.1 answers to ``POST .../infer_stream``
  (status line, headers, chunked body) and gives back each Server-Sent Event's data,
  the events read by :mod:`benchmarks.sse` (the one SSE parser of the benchmarks).
- :func:`sse_value` and :func:`grpc_reader` read the one INT32 a response of the
  streaming benchmark model carries (inferd wraps gRPC stream answers in Triton's
  ``ModelStreamInferResponse``, MLServer sends ``ModelInferResponse`` bare).
- :func:`stream_problem` says what is wrong with one stream's values, if anything:
  each stream must get exactly 0, 1, ..., N-1, in order, nothing duplicated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from .sse import MESSAGE, SseEvent, SseSplitter

HEADERS_END = b"\r\n\r\n"
CRLF = b"\r\n"
# The Triton parameter marking a decoupled stream's last (empty) response.
FINAL_RESPONSE = "triton_final_response"


class StreamError(Exception):
    """A stream answered wrongly: an error event or message, a bad status, bad framing."""


class SseReader:
    """Reads the HTTP/1.1 answers of one keep-alive connection, one at a time.

    ``feed(data)`` returns the data of every event completed by ``data`` (the bytes
    after ``data: ``); ``done`` turns true when the answer's last chunk arrived, and
    ``next_answer()`` readies the reader for the next answer on the connection.
    """

    def __init__(self) -> None:
        self.next_answer()

    def next_answer(self) -> None:
        self.done = False
        self._in_body = False
        self._raw = b""  # bytes not yet taken apart (headers, chunk framing)
        self._events = SseSplitter()  # de-chunked body, split into events

    def feed(self, data: bytes) -> list[bytes]:
        if self.done:
            raise StreamError(f"bytes after the end of an answer: {data[:200]!r}")
        self._raw += data
        if not self._in_body and not self._read_headers():
            return []
        complete = self._events.feed(self._dechunk())
        if self.done and (self._raw or self._events.rest.strip()):
            rest = self._events.rest + self._raw
            raise StreamError(f"bytes after the last event: {rest[:200]!r}")
        return [event_data(event) for event in complete]

    def _read_headers(self) -> bool:
        end = self._raw.find(HEADERS_END)
        if end < 0:
            return False
        head, self._raw = self._raw[:end].decode("latin-1"), self._raw[end + 4 :]
        status_line, *header_lines = head.split("\r\n")
        fields = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)
        }
        if status_line.split(" ", 2)[1:2] != ["200"]:
            raise StreamError(f"answer {status_line!r}: {self._raw[:500]!r}")
        if fields.get("transfer-encoding", "").lower() != "chunked":
            raise StreamError(f"not a chunked answer: {head!r}")
        self._in_body = True
        return True

    def _dechunk(self) -> bytes:
        """The body bytes of every complete chunk in; the rest stays in ``_raw``."""
        raw, position, pieces = self._raw, 0, []
        while True:
            line_end = raw.find(CRLF, position)
            if line_end < 0:
                break
            size = int(raw[position:line_end].split(b";", 1)[0], 16)
            chunk_end = line_end + 2 + size
            if len(raw) < chunk_end + 2:
                break
            if size == 0:  # the last chunk (no trailers are sent)
                self.done = True
                position = chunk_end + 2
                break
            pieces.append(raw[line_end + 2 : chunk_end])
            position = chunk_end + 2
        self._raw = raw[position:]
        return b"".join(pieces)


def event_data(event: SseEvent) -> bytes:
    """The data of a ``message`` event; StreamError for any other (``error``)."""
    if event.kind != MESSAGE:
        raise StreamError(f"not a data event: {event.kind} {event.data[:200]!r}")
    return event.data


def sse_value(data: bytes) -> int:
    """The INT32 of one event's V2 response JSON."""
    answer = orjson.loads(data)
    try:
        return int(answer["outputs"][0]["data"][0])
    except (KeyError, IndexError, TypeError):
        raise StreamError(f"not a response of the count model: {data[:300]!r}") from None


def grpc_reader(wrapped: bool) -> Callable[[bytes], int | None]:
    """What reads the INT32 of one serialized gRPC stream answer (None for a decoupled
    stream's empty final response). ``wrapped``: answers are ModelStreamInferResponses
    (inferd, Triton), else bare ModelInferResponses (MLServer). inferd's message classes
    are imported here, not at the top: the benchmark picks inferd's tree first."""
    from inferd.protocol import pb

    stream_answer, bare_answer = pb.ModelStreamInferResponse, pb.ModelInferResponse

    def read(message: bytes) -> int | None:
        if wrapped:
            answer = stream_answer.FromString(message)
            if answer.error_message:
                raise StreamError(f"error in the stream: {answer.error_message}")
            response = answer.infer_response
        else:
            response = bare_answer.FromString(message)
        return response_value(response)

    return read


def response_value(response: Any) -> int | None:
    """The INT32 of a ModelInferResponse of the count model; None for an empty final one."""
    if not response.outputs:
        final = response.parameters.get(FINAL_RESPONSE)
        if final is not None and final.bool_param:
            return None
        raise StreamError(f"a response without outputs: {response}")
    if response.raw_output_contents:
        return int.from_bytes(response.raw_output_contents[0][:4], "little", signed=True)
    values = response.outputs[0].contents.int_contents
    if not values:
        raise StreamError(f"not a response of the count model: {response}")
    return int(values[0])


def stream_problem(values: Sequence[int], expected: Sequence[int], finals: int = 0) -> str | None:
    """What is wrong with one stream's values (``expected``: 0..N-1), or None.
    ``finals``: the empty final responses it got (at most one)."""
    if finals > 1:
        return f"{finals} final responses"
    got, want = list(values), list(expected)
    if got == want:
        return None
    duplicated = sorted({v for v in got if got.count(v) > 1})
    if duplicated:
        return f"duplicated responses {duplicated[:10]} ({len(got)} of {len(want)})"
    if len(got) != len(want):
        return f"{len(got)} responses, not {len(want)}"
    first = next(i for i in range(len(got)) if got[i] != want[i])
    return f"out of order: response {first} is {got[first]}, not {want[first]}"
