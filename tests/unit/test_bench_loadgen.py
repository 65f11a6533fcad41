"""The load generators' pure parts: wrk's Lua script and result line, h2load's output."""

from __future__ import annotations

import pytest

from benchmarks.loadgen import (
    WRK_MARKER,
    h2load_request_count,
    parse_h2load,
    parse_wrk_output,
    wrk_command,
    wrk_lua_script,
)

WRK_STDOUT = f"""Running 2s test @ http://127.0.0.1:1/v2/models/iris/infer
  1 threads and 16 connections
{WRK_MARKER} requests=3000 duration_us=2000000 bytes=1 non2xx=2 connect=0 read=1 write=0 \
timeout=3 p50_us=1500 p90_us=4000 p99_us=9000 mean_us=2000.5 max_us=12000
"""

H2LOAD_STDOUT = """starting benchmark...
finished in 36.19ms, 552.59 req/s, 63.73KB/s
requests: 20 total, 20 started, 20 done, 20 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 20 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 2.31KB (2362) total, 210B (210) headers (space savings 87.04%), 860B (860) data
"""
ANSWER_SIZE = 43  # 860 bytes of DATA for 20 answers


def h2load_log(latencies_us: list[int]) -> str:
    return "".join(f"17953602333{i:05d}\t200\t{us}\n" for i, us in enumerate(latencies_us))


def test_wrk_result_line_is_parsed_into_rates_latencies_and_errors() -> None:
    result = parse_wrk_output(WRK_STDOUT)
    assert result.requests == 3000
    assert result.duration_s == 2.0
    assert result.requests_per_s == 1500.0
    assert (result.p50_ms, result.p90_ms, result.p99_ms) == (1.5, 4.0, 9.0)
    assert (result.mean_ms, result.max_ms) == (2.0005, 12.0)
    assert result.socket_errors == {"connect": 0, "read": 1, "write": 0, "timeout": 3}
    assert result.errors == 2 + 1 + 3
    assert result.to_dict()["errors"] == 6


def test_wrk_output_without_the_result_line_is_an_error() -> None:
    with pytest.raises(RuntimeError, match=WRK_MARKER):
        parse_wrk_output("wrk: connection refused\n")


def test_the_lua_script_carries_the_body_and_prints_the_marker() -> None:
    script = wrk_lua_script('{"inputs": []}')
    assert 'wrk.body = [==[{"inputs": []}]==]' in script
    assert WRK_MARKER in script and "function done(summary, latency, requests)" in script
    with pytest.raises(ValueError, match="]==]"):
        wrk_lua_script("a]==]b")


def test_wrk_command_line() -> None:
    command = wrk_command(
        "wrk", "s.lua", "http://h/x", connections=16, threads=1, seconds=2.0, timeout_s=10
    )
    assert command == ["wrk", "-t1", "-c16", "-d2s", "--timeout=10s", "-s", "s.lua", "http://h/x"]


def test_h2load_output_and_log_give_rate_latencies_and_no_errors() -> None:
    latencies = [1000 * (i + 1) for i in range(20)]  # 1..20 ms
    result = parse_h2load(H2LOAD_STDOUT, h2load_log(latencies), ANSWER_SIZE)
    assert result.requests == 20
    assert result.duration_s == pytest.approx(0.03619)
    assert result.requests_per_s == 552.59
    assert result.p50_ms == pytest.approx(10.5)
    assert result.max_ms == 20.0 and result.mean_ms == pytest.approx(10.5)
    assert result.errors == 0


def test_h2load_answers_of_another_size_count_as_grpc_errors() -> None:
    # A gRPC error is HTTP 200 with no DATA: 19 answers' worth of bytes for 20 successes.
    short = H2LOAD_STDOUT.replace("860B (860) data", "817B (817) data")
    assert parse_h2load(short, h2load_log([1000] * 20), ANSWER_SIZE).grpc_errors == 1
    # Bytes that are no multiple of the answer: no answer can be trusted.
    odd = H2LOAD_STDOUT.replace("860B (860) data", "861B (861) data")
    assert parse_h2load(odd, h2load_log([1000] * 20), ANSWER_SIZE).grpc_errors == 20


def test_h2load_failures_and_unfinished_requests_are_errors() -> None:
    stdout = H2LOAD_STDOUT.replace(
        "20 total, 20 started, 20 done, 20 succeeded, 0 failed, 0 errored, 0 timeout",
        "20 total, 20 started, 18 done, 15 succeeded, 2 failed, 1 errored, 0 timeout",
    ).replace("860B (860) data", "645B (645) data")
    result = parse_h2load(stdout, h2load_log([1000] * 18), ANSWER_SIZE)
    assert result.failed == 2 + 1 + 0 + (20 - 18)
    assert result.grpc_errors == 0 and result.errors == 5


def test_h2load_output_that_cannot_be_parsed_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="cannot parse h2load output"):
        parse_h2load("no summary here", "", ANSWER_SIZE)


def test_h2load_run_size_comes_from_the_warm_up_rate() -> None:
    assert h2load_request_count(3.0, None) == 3000  # no rate yet: ~1000 req/s assumed
    assert h2load_request_count(0.1, None) == 500
    assert h2load_request_count(10.0, 2500.0) == 25_000
    assert h2load_request_count(1.0, 10.0) == 1000
