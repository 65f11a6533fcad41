"""The open-loop load's HTTP/1.1 framing: requests out, whole answers in."""

from __future__ import annotations

from benchmarks.openload import Answer, Drive, http_request, parse_response, summarize_drive

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


def test_a_drive_is_summarized_with_refusals_apart_from_errors() -> None:
    answers = [
        Answer(0, 0.0, 0.010, 200, None, b"right"),
        Answer(1, 0.1, 0.030, 200, None, b"wrong"),
        Answer(2, 0.2, 0.001, 503, "1", b"{}"),
        Answer(3, 0.3, 0.003, 503, None, b"{}"),
        Answer(4, 0.4, 1.000, 0, None, b""),
    ]
    result = summarize_drive(
        Drive(answers, unsent=7, duration_s=2.0), lambda b: b == b"right", 1, 2
    )
    assert (result.requests, result.requests_per_s) == (2, 1.0)
    assert (result.refused, result.refused_without_retry_after, result.refused_p50_ms) == (
        2,
        1,
        2.0,
    )
    assert (result.wrong, result.failed, result.unsent) == (1, 1, 7)
    assert result.errors == 1 + 1 + 1, "a wrong answer, a lost one, a 503 without Retry-After"
    assert result.max_ms == 30.0
    assert "refused 2 (p50 2.0 ms), unsent 7, server RSS 1 -> 2 MiB" in result.detail()
