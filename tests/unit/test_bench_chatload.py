"""The chat streaming load's parsing, checks and figures, without a server."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from benchmarks.chatload import (
    ChatStreamError,
    StreamRecord,
    arrivals,
    chat_data,
    chat_result,
)
from benchmarks.sse import SseSplitter


def chunk(content: str | None = None, finish: str | None = None, role: bool = False) -> str:
    delta = {"role": "assistant"} if role else {}
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return json.dumps({"object": "chat.completion.chunk", "choices": [choice]})


def test_a_right_stream_counts_its_text_chunks_and_when_they_came() -> None:
    record = StreamRecord(sent_at=1.0)
    record.add_event(chunk(role=True), 1.01)  # the role alone is not a token
    record.add_event(chunk("once"), 1.02)
    record.add_event(chunk(" upon"), 1.05)
    record.add_event(chunk("", "length"), 1.06)
    record.add_event("[DONE]", 1.07)
    assert record.token_times == [1.02, 1.05]
    assert (record.finish_reason, record.done, record.problem()) == ("length", True, None)


@pytest.mark.parametrize(
    ("events", "problem"),
    [
        ([chunk("a", "stop")], "no data: [DONE]"),
        ([chunk(None, "stop"), "[DONE]"], "no token"),
        ([chunk("a"), "[DONE]"], "finish_reason None"),
    ],
)
def test_a_stream_missing_done_tokens_or_finish_reason_is_wrong(
    events: list[str], problem: str
) -> None:
    record = StreamRecord(sent_at=0.0)
    for data in events:
        record.add_event(data, 0.1)
    assert record.problem() == problem


@pytest.mark.parametrize(
    "data",
    ['{"object": "text_completion", "choices": []}', "not json", '{"object": "x"}'],
)
def test_an_event_that_is_not_a_chat_chunk_is_an_error(data: str) -> None:
    with pytest.raises(ChatStreamError):
        StreamRecord(sent_at=0.0).add_event(data, 0.1)


def test_an_event_after_done_is_an_error() -> None:
    record = StreamRecord(sent_at=0.0)
    record.add_event("[DONE]", 0.1)
    with pytest.raises(ChatStreamError, match="after"):
        record.add_event(chunk("a"), 0.2)


def test_sse_pieces_give_data_payloads_and_skip_comments() -> None:
    events = SseSplitter()
    assert events.feed(b"data: [DO") == []
    got = events.feed(b'NE]\n\n: keep-alive\n\ndata:{"a": 1}\n\nevent: x\ndata: 1\n\n')
    assert [chat_data(event) for event in got[:2]] == ["[DONE]", '{"a": 1}']
    with pytest.raises(ChatStreamError, match="not a data event"):
        chat_data(got[2])


def test_figures_are_ttft_percentiles_tokens_per_second_and_inter_token_gaps() -> None:
    first = StreamRecord(sent_at=0.0, token_times=[0.010, 0.012, 0.014], done=True)
    second = StreamRecord(sent_at=1.0, token_times=[1.030, 1.034], done=True)
    result = chat_result([first, second], bad=1, duration_s=2.0)
    assert (result.requests, result.streams, result.errors) == (5, 2, 1)
    assert result.requests_per_s == pytest.approx(2.5)
    assert result.p50_ms == pytest.approx(20.0)  # TTFTs 10 and 30 ms
    assert result.max_ms == pytest.approx(30.0)
    assert result.itl_p50_ms == pytest.approx(2.0)  # gaps 2, 2 and 4 ms
    assert result.unit == "tok"


def test_the_usage_chunk_s_completion_tokens_count_over_text_chunks() -> None:
    record = StreamRecord(sent_at=0.0)
    record.add_event(chunk("a"), 0.1)  # one text chunk for three tokens (two made no text)
    usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    record.add_event(json.dumps({"object": "chat.completion.chunk", "choices": [],
                                 "usage": usage}), 0.2)  # fmt: skip
    assert (record.tokens, len(record.token_times)) == (3, 1)
    assert chat_result([record], bad=0, duration_s=1.0).requests == 3
    no_usage = StreamRecord(sent_at=0.0, token_times=[0.1, 0.2])
    assert no_usage.tokens == 2


def test_a_run_without_a_right_stream_has_zero_figures() -> None:
    result = chat_result([], bad=3, duration_s=1.0)
    assert (result.requests_per_s, result.p50_ms, result.itl_p99_ms, result.errors) == (0, 0, 0, 3)


def test_goodput_counts_the_streams_within_the_latency_target() -> None:
    fast = StreamRecord(sent_at=0.0, token_times=[0.5, 0.55, 0.6], done=True)
    slow_first = StreamRecord(sent_at=0.0, token_times=[1.2, 1.25], done=True)  # TTFT 1.2 s
    slow_tokens = StreamRecord(sent_at=0.0, token_times=[0.1, 0.4], done=True)  # 300 ms/token
    assert fast.time_per_output_token() == pytest.approx(0.05)
    assert [r.met_target() for r in (fast, slow_first, slow_tokens)] == [True, False, False]
    result = chat_result([fast, slow_first, slow_tokens], bad=0, duration_s=2.0)
    assert result.goodput_per_s == pytest.approx(0.5)
    assert "goodput 0.5/s" in result.detail()


def test_open_loop_arrivals_come_at_the_rate_until_the_deadline() -> None:
    async def times() -> list[float]:
        start = time.perf_counter()
        return [t - start async for t in arrivals(200.0, start + 0.25)]

    came = asyncio.run(times())
    assert 20 <= len(came) <= 100  # about 50: Poisson, seeded
    assert came == sorted(came) and came[-1] < 0.25
