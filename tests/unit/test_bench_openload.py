"""The open-loop load's summary (its HTTP/1.1 framing is the tools' client:
test_leanhttp.py)."""

from __future__ import annotations

from benchmarks.openload import Answer, Drive, summarize_drive


def test_a_drive_is_summarized_with_refusals_apart_from_errors() -> None:
    answers = [
        Answer(0, 0.0, 0.010, 200, None, b"right"),
        Answer(1, 0.1, 0.030, 200, None, b"wrong"),
        Answer(2, 0.2, 0.001, 503, 1.0, b"{}"),
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
