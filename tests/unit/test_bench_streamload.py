"""The streaming load's pure parts: streams per process, jobs, tallies, one connection."""

from __future__ import annotations

import asyncio
import json

import pytest

from benchmarks.loadgen import Target
from benchmarks.streamclient import (
    GRPC,
    SSE,
    STREAM_INFER_PATH,
    Job,
    SseConnection,
    Tally,
    check,
    http_request,
)
from benchmarks.streamload import (
    StreamLoad,
    StreamResult,
    StreamTarget,
    combine,
    job_for,
    split_streams,
)
from benchmarks.streamwire import StreamError

BODY = b'{"inputs": []}'


@pytest.mark.parametrize(
    ("streams", "clients", "split"),
    [(16, 4, [4, 4, 4, 4]), (10, 4, [3, 3, 2, 2]), (2, 4, [1, 1]), (5, 1, [5]), (1, 1, [1])],
)
def test_streams_spread_evenly_over_processes(streams: int, clients: int, split: list[int]) -> None:
    assert split_streams(streams, clients) == split


def test_no_streams_or_no_processes_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        split_streams(0, 4)
    with pytest.raises(ValueError, match=">= 1"):
        split_streams(4, 0)


def test_a_job_is_where_the_target_points_and_survives_its_json_line() -> None:
    target = StreamTarget(
        f"http://127.0.0.1:9001{STREAM_INFER_PATH}", b"\x00\xffbytes", 0, GRPC, 50, False, True
    )
    job = job_for(target, 3)
    assert (job.transport, job.host, job.port, job.path) == (
        GRPC,
        "127.0.0.1",
        9001,
        STREAM_INFER_PATH,
    )
    assert (job.responses, job.streams, job.wrapped, job.final_response) == (50, 3, False, True)
    line = job.to_json()
    assert "\n" not in line
    assert Job.from_json(line) == job


def test_a_target_without_a_port_is_refused() -> None:
    with pytest.raises(ValueError, match="no host and port"):
        job_for(StreamTarget("http://somewhere/path", BODY), 1)


def test_a_stream_load_needs_a_stream_target() -> None:
    with pytest.raises(TypeError, match="StreamTarget"):
        StreamLoad(4).run(Target("http://127.0.0.1:1/", BODY), 1.0)


def tally(**fields: object) -> dict[str, object]:
    base = Tally(streams=2, responses=200, elapsed_s=2.0, cpu_s=0.002)
    base.stream_ms, base.first_ms = [10.0, 30.0], [1.0, 3.0]
    return json.loads(json.dumps(base.__dict__ | fields))  # as a client prints it


def test_tallies_combine_into_responses_per_second_over_the_longest_client() -> None:
    result = combine([tally(), tally(elapsed_s=4.0, failed=1, problems=["3 responses, not 100"])])
    assert result.requests == 400 and result.streams == 4
    assert result.duration_s == 4.0 and result.requests_per_s == 100.0
    assert (result.p50_ms, result.max_ms, result.mean_ms) == (20.0, 30.0, 20.0)
    assert result.first_response_p50_ms == 2.0
    assert result.client_cpu_us_per_response == pytest.approx(10.0)
    assert result.errors == 1 and result.problems == ("3 responses, not 100",)


def test_problems_kept_are_few_and_nothing_right_is_no_rate() -> None:
    many = [tally(streams=0, responses=0, stream_ms=[], first_ms=[], failed=5,
                  problems=[f"p{i}" for i in range(5)]) for _ in range(3)]  # fmt: skip
    result = combine(many)
    assert result.requests_per_s == 0 and result.errors == 15
    assert len(result.problems) == 5 and result.client_cpu_us_per_response is None
    assert result.p99_ms == 0


def test_a_stream_result_counts_responses() -> None:
    result = combine([tally()])
    assert StreamResult.unit == "resp" and result.to_dict()["unit"] == "resp"
    assert result.to_dict()["errors"] == 0 and result.to_dict()["streams"] == 2
    assert "2 streams" in result.detail() and "load CPU 10.0 us/resp" in result.detail()


def test_the_http_request_is_written_once_whole() -> None:
    job = Job(SSE, "127.0.0.1", 8080, "/v2/models/count/infer_stream", BODY, 10, 1)
    head, body = http_request(job).split(b"\r\n\r\n")
    assert body == BODY
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v2/models/count/infer_stream HTTP/1.1"
    assert "Host: 127.0.0.1:8080" in lines and f"Content-Length: {len(BODY)}" in lines


def test_a_finished_stream_counts_only_when_it_is_exactly_right() -> None:
    counted = Tally()
    check(counted, [0, 1, 2], [0, 1, 2], 0, 1.0, 1.001)
    check(counted, [0, 1, 2], [0, 1, 2], 1, 1.0, 1.002)
    check(counted, [0, 2, 1], [0, 1, 2], 0, 1.0, 1.0)
    check(counted, [0, 1, 2], [0, 1, 2], 2, 1.0, 1.0)
    assert (counted.streams, counted.responses, counted.failed) == (2, 6, 2)
    assert counted.problems == ["out of order: response 1 is 2, not 1", "2 final responses"]
    assert counted.first_ms == pytest.approx([1.0, 2.0])


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        pass


def sse_answer(*values: int) -> bytes:
    events = b"".join(
        b'data: {"outputs": [{"name": "i", "data": [%d]}]}\n\n' % value for value in values
    )
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked"
    return head + b"\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)


@pytest.mark.anyio
async def test_an_sse_connection_runs_stream_after_stream() -> None:
    connection, transport = SseConnection(), FakeTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    for values in ([0, 1, 2], [0]):
        stream = asyncio.create_task(connection.stream(b"REQUEST"))
        await asyncio.sleep(0)
        answer = sse_answer(*values)
        connection.data_received(answer[:50])
        connection.data_received(answer[50:])
        assert await stream == values
        assert connection.first_at > 0
    assert transport.written == [b"REQUEST", b"REQUEST"]


@pytest.mark.anyio
async def test_an_sse_connection_fails_a_stream_on_bad_bytes_or_a_close() -> None:
    connection = SseConnection()
    connection.connection_made(FakeTransport())  # type: ignore[arg-type]
    stream = asyncio.create_task(connection.stream(b"REQUEST"))
    await asyncio.sleep(0)
    connection.data_received(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
    with pytest.raises(StreamError, match="503"):
        await stream
    stream = asyncio.create_task(connection.stream(b"REQUEST"))
    await asyncio.sleep(0)
    connection.connection_lost(None)
    with pytest.raises(StreamError, match="closed mid-answer"):
        await stream
    with pytest.raises(StreamError, match="connection closed"):
        await connection.stream(b"REQUEST")
