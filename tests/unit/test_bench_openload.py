"""The open-loop load's HTTP/1.1 framing: requests out, whole answers in."""

from __future__ import annotations

from benchmarks.openload import http_request, parse_response

REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"Retry-After: 1\r\ncontent-length: 13\r\n\r\n"
    b'{"error":"x"}'
)


def test_an_answer_is_parsed_only_once_it_is_whole() -> None:
    for cut in (10, REFUSED.index(b"\r\n\r\n"), len(REFUSED) - 1):
        assert parse_response(bytearray(REFUSED[:cut])) is None
    assert parse_response(bytearray(REFUSED)) == (503, "1", b'{"error":"x"}', len(REFUSED))


def test_the_next_answer_is_left_in_the_buffer() -> None:
    ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    parsed = parse_response(bytearray(ok + REFUSED))
    assert parsed is not None
    status, retry_after, body, used = parsed
    assert (status, retry_after, body) == (200, None, b"{}")
    assert (ok + REFUSED)[used:] == REFUSED


def test_a_request_is_a_json_post_with_its_length() -> None:
    wire = http_request("http://127.0.0.1:8080/v2/models/m/infer", b'{"a":1}')
    head, body = wire.split(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /v2/models/m/infer HTTP/1.1"
    assert b"Content-Length: 7" in head and b"Host: 127.0.0.1:8080" in head
    assert body == b'{"a":1}'
