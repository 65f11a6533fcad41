"""The benchmarks' one SSE parser: events of a whole body and of a body in pieces."""

from __future__ import annotations

from benchmarks.sse import SseEvent, SseSplitter, parse_event, sse_events


def test_fields_of_an_event() -> None:
    assert parse_event(b"data: 1") == SseEvent("message", b"1")
    assert parse_event(b"event: error\r\ndata:{}") == SseEvent("error", b"{}")
    assert parse_event(b"data: a\ndata: b\nid: 3") == SseEvent("message", b"a\nb")
    assert parse_event(b": keep-alive") is None and parse_event(b"") is None


def test_a_whole_body_and_the_same_body_in_pieces_give_the_same_events() -> None:
    body = b'data: {"n": 0}\n\n: ping\n\nevent: error\ndata: {"error": "x"}\n\n'
    expected = [SseEvent("message", b'{"n": 0}'), SseEvent("error", b'{"error": "x"}')]
    assert sse_events(body) == expected
    splitter, events = SseSplitter(), []
    for index in range(len(body)):
        events += splitter.feed(body[index : index + 1])
    assert events == expected and splitter.rest == b""
