"""The tools' and benchmarks' HTTP/1.1 client: requests out, whole answers in."""

from __future__ import annotations

from inferd.tools.leanhttp import NO_LENGTH, parse_answer, seconds
from inferd.tools.v2client import Endpoint, Reply, http_post

REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"Retry-After: 1\r\ncontent-length: 13\r\n\r\n"
    b'{"error":"x"}'
)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n3\r\n wo\r\n0\r\n\r\n"
)


def test_an_answer_is_parsed_only_once_it_is_whole() -> None:
    for cut in (10, REFUSED.index(b"\r\n\r\n"), len(REFUSED) - 1):
        assert parse_answer(bytearray(REFUSED[:cut])) is None
    refused = Reply(503, b'{"error":"x"}', retry_after=1.0)
    assert parse_answer(bytearray(REFUSED)) == (refused, len(REFUSED))
    assert not refused.ok and refused.retryable


def test_the_next_answer_is_left_in_the_buffer() -> None:
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    parsed = parse_answer(bytearray(ok + REFUSED))
    assert parsed is not None
    reply, used = parsed
    assert (reply.status, reply.retry_after, reply.body, reply.ok) == (200, None, b"{}", True)
    assert (ok + REFUSED)[used:] == REFUSED


def test_a_chunked_answer_is_read_whole() -> None:
    for cut in (len(CHUNKED) - 3, CHUNKED.index(b" wo")):
        assert parse_answer(bytearray(CHUNKED[:cut])) is None
    assert parse_answer(bytearray(CHUNKED)) == (Reply(200, b"hello wo"), len(CHUNKED))


def test_an_answer_without_a_length_is_an_error_unless_it_has_no_body() -> None:
    unframed = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n"
    parsed = parse_answer(bytearray(unframed))
    assert parsed is not None and parsed[0].error == NO_LENGTH and not parsed[0].ok
    empty = parse_answer(bytearray(b"HTTP/1.1 204 No Content\r\n\r\n"))
    assert empty is not None and empty[0] == Reply(204, b"")


def test_connection_close_and_retry_after_forms_are_read() -> None:
    closing = (
        b"HTTP/1.1 503 X\r\nRetry-After: 0.5\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    parsed = parse_answer(bytearray(closing))
    assert parsed is not None
    assert (parsed[0].close, parsed[0].retry_after) == (True, 0.5)
    assert seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None, "a date: the caller backs off"


def test_a_request_is_a_json_post_with_its_length() -> None:
    wire = http_post(Endpoint.parse("127.0.0.1:8080"), "/v2/models/m/infer", b'{"a":1}')
    head, body = wire.split(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /v2/models/m/infer HTTP/1.1"
    assert b"Content-Length: 7" in head and b"Host: 127.0.0.1:8080" in head
    assert body == b'{"a":1}'
