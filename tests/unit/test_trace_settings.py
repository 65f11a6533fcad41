"""Triton's trace settings: checking, the server's and a model's, sampling by them."""

from __future__ import annotations

from typing import Any

import pytest

from inferd.errors import InvalidRequest
from inferd.observability.trace_settings import SERVER, TraceSettings, parse_changes


def test_changes_are_checked_in_tritons_words() -> None:
    assert parse_changes({"trace_rate": "10", "trace_level": ["TENSORS", "TIMESTAMPS"]}) == {
        "trace_rate": "10",
        "trace_level": ["TIMESTAMPS", "TENSORS"],
    }
    assert parse_changes({"trace_count": ["-1"], "log_frequency": None}) == {
        "trace_count": "-1",
        "log_frequency": None,
    }
    assert parse_changes({"trace_mode": "opentelemetry"}) == {}  # a GET's answer sent back
    refused: list[tuple[dict[str, Any], str]] = [
        ({"trace_rate": "x"}, "Unable to parse 'trace_rate', got: 'x'"),
        ({"trace_rate": "0"}, "Unable to parse 'trace_rate', value is out of range [ 1,"),
        ({"trace_count": "-2"}, "Unable to parse 'trace_count', value is out of range [ -1,"),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF'"),
        ({"trace_level": ["LOUD"]}, "Unknown trace level 'LOUD'"),
        ({"trace_file": "/tmp/t.json"}, "trace file location can not be updated"),
        ({"trace_colour": "1"}, "Unknown trace setting 'trace_colour'"),
    ]
    for raw, words in refused:
        with pytest.raises(InvalidRequest, match=words.replace("[", r"\[").replace("(", r"\(")):
            parse_changes(raw)


def test_a_models_settings_follow_the_servers_where_not_set() -> None:
    traces = TraceSettings(tracing=True)
    assert traces.answer() == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": "",
        "trace_mode": "opentelemetry",
    }
    traces.change("m", {"trace_rate": "5"})
    traces.change(SERVER, {"trace_count": "7", "trace_rate": "2"})
    assert (traces.answer("m")["trace_rate"], traces.answer("m")["trace_count"]) == ("5", "7")
    assert traces.answer("other")["trace_rate"] == "2"  # no settings of its own
    traces.change("m", {"trace_rate": None})  # cleared: the server's again, and no scope left
    assert traces.answer("m")["trace_rate"] == "2" and traces.fields_set("m") == {}
    traces.change(SERVER, {"trace_rate": None, "trace_count": None})  # back to the start
    assert traces.answer()["trace_rate"] == "1"
    traces.change("m", {"trace_level": ["OFF"]}, whole=True)
    assert traces.fields_set("m") == {"trace_level": ["OFF"]}


def test_sampling_takes_the_rate_th_request_while_the_count_lasts() -> None:
    traces = TraceSettings(tracing=True)
    traces.change("m", {"trace_rate": "3", "trace_count": "2"})
    assert [traces.sample("m") for _ in range(9)] == [False, False, True] * 2 + [False] * 3
    assert traces.answer("m")["trace_count"] == "0"  # what is left of it
    assert all(traces.sample("other") for _ in range(3))  # the server's: every one
    traces.change("m", {"trace_level": ["OFF"]})
    traces.change("m", {"trace_count": "-1"})
    assert not any(traces.sample("m") for _ in range(6))


def test_with_tracing_off_nothing_can_be_turned_on() -> None:
    traces = TraceSettings(tracing=False)
    assert traces.answer()["trace_level"] == ["OFF"] and traces.answer()["trace_rate"] == "1000"
    with pytest.raises(InvalidRequest, match="Tracing is off on this server"):
        traces.change(SERVER, {"trace_level": ["TIMESTAMPS"]})
    traces.change(SERVER, {"trace_rate": "10"})  # the rest may be set
    assert not traces.sample("m")
