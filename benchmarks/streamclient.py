"""The streaming load's client: streams over SSE or gRPC, each checked, few costs each.

A :class:`Job` says where to go and what to send (pre-encoded once); :func:`run_streams`
keeps ``streams`` streams going back to back until a deadline and returns a :class:`Tally`.
SSE goes over plain asyncio connections (HTTP/1.1 keep-alive, the request bytes written
as they are, the answer read by :class:`~benchmarks.streamwire.SseReader`); gRPC over one
bare HTTP/2 connection per process (:mod:`benchmarks.h2grpc`: grpcio's client would cost
more per message than the servers do), one request per call, half-closed at once.

``python -m benchmarks.streamclient`` is one load process (``benchmarks.streamload``
starts several): it reads its job as one JSON line on stdin, prints ``ready`` once
imported, waits for ``go`` on stdin, connects and runs, and prints its tally as one
JSON line.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .h2grpc import H2Error, H2GrpcConnection
from .streamwire import SseReader, StreamError, grpc_reader, sse_value, stream_problem

SSE = "sse"
GRPC = "grpc"
STREAM_INFER_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"
KEPT_PROBLEMS = 5  # a tally keeps the first few problems it saw, with their count


@dataclass(frozen=True)
class Job:
    """What one client process does."""

    transport: str  # SSE or GRPC
    host: str
    port: int
    path: str  # SSE: the infer_stream path; gRPC: the method
    body: bytes  # SSE: the JSON request; gRPC: a serialized ModelInferRequest
    responses: int  # N: each stream must get 0..N-1
    streams: int  # concurrent streams
    wrapped: bool = True  # gRPC answers are ModelStreamInferResponses (else bare)
    final_response: bool = False  # a decoupled stream ends with an empty final response

    def to_json(self) -> str:
        return json.dumps(asdict(self) | {"body": base64.b64encode(self.body).decode()})

    @classmethod
    def from_json(cls, text: str) -> Job:
        fields = json.loads(text)
        return cls(**fields | {"body": base64.b64decode(fields["body"])})


@dataclass
class Tally:
    """What one client saw: streams that were right, and what went wrong in the others."""

    streams: int = 0  # complete and right
    responses: int = 0  # in those streams
    failed: int = 0
    problems: list[str] = field(default_factory=list)
    stream_ms: list[float] = field(default_factory=list)  # request sent -> last response
    first_ms: list[float] = field(default_factory=list)  # request sent -> first response
    elapsed_s: float = 0.0
    cpu_s: float = 0.0  # this client's own CPU time

    def good(self, count: int, started: float, first: float, ended: float) -> None:
        self.streams += 1
        self.responses += count
        self.stream_ms.append((ended - started) * 1e3)
        self.first_ms.append((first - started) * 1e3)

    def bad(self, problem: str) -> None:
        self.failed += 1
        if len(self.problems) < KEPT_PROBLEMS:
            self.problems.append(problem)


class SseConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection running one stream at a time."""

    def __init__(self) -> None:
        self.reader = SseReader()
        self.values: list[int] = []
        self.first_at = 0.0
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:
            events = self.reader.feed(data)
            if events and not self.values:
                self.first_at = time.perf_counter()
            self.values.extend(sse_value(event) for event in events)
        except (StreamError, ValueError) as error:
            waiter.set_exception(StreamError(str(error)))
            return
        if self.reader.done:
            waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(StreamError(f"connection closed mid-answer ({exc})"))

    async def stream(self, request: bytes) -> list[int]:
        """Send ``request`` and read its whole answer: the stream's values."""
        if self.transport is None:
            raise StreamError("connection closed")
        self.values, self.first_at = [], 0.0
        self.reader.next_answer()
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        await self.waiter
        return self.values

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def http_request(job: Job) -> bytes:
    head = (
        f"POST {job.path} HTTP/1.1\r\nHost: {job.host}:{job.port}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(job.body)}\r\n\r\n"
    )
    return head.encode() + job.body


async def sse_streams(job: Job, deadline: float, tally: Tally) -> None:
    loop = asyncio.get_running_loop()
    request = http_request(job)
    expected = list(range(job.responses))

    async def worker() -> None:
        connection: SseConnection | None = None
        while time.perf_counter() < deadline:
            if connection is None or connection.transport is None:
                try:
                    _, connection = await loop.create_connection(SseConnection, job.host, job.port)
                except OSError as error:
                    tally.bad(f"cannot connect: {error}")
                    return
            started = time.perf_counter()
            try:
                values = await connection.stream(request)
            except StreamError as error:
                tally.bad(str(error))
                connection.close()
                connection = None
                continue
            check(tally, values, expected, 0, started, connection.first_at)
        if connection is not None:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(job.streams)))


async def grpc_streams(job: Job, deadline: float, tally: Tally) -> None:
    loop = asyncio.get_running_loop()
    expected = list(range(job.responses))
    read = grpc_reader(job.wrapped)
    authority = f"{job.host}:{job.port}"
    _, connection = await loop.create_connection(
        lambda: H2GrpcConnection(authority, job.path), job.host, job.port
    )

    async def worker() -> None:
        while time.perf_counter() < deadline and connection.transport is not None:
            started = time.perf_counter()
            try:
                result = await connection.call(job.body)
                values = [read(message) for message in result.messages]
            except (H2Error, StreamError) as error:
                tally.bad(f"{type(error).__name__}: {error}")
                continue
            finals = values.count(None)
            if job.final_response and (finals != 1 or values[-1] is not None):
                tally.bad(f"{finals} final responses, not 1 at the end")
                continue
            counted = [value for value in values if value is not None]
            check(tally, counted, expected, finals, started, result.first_at)

    try:
        await asyncio.gather(*(worker() for _ in range(job.streams)))
    finally:
        connection.close()


def check(
    tally: Tally, values: list[int], expected: list[int], finals: int, started: float, first: float
) -> None:
    """Count a finished stream as good or bad (the common case costs one comparison)."""
    ended = time.perf_counter()
    if values == expected and finals <= 1:
        tally.good(len(values), started, first, ended)
        return
    tally.bad(stream_problem(values, expected, finals) or "wrong stream")


async def run_streams(job: Job, seconds: float) -> Tally:
    """Keep ``job.streams`` streams going for ``seconds``; streams running at the
    deadline finish and count."""
    tally = Tally()
    started, cpu = time.perf_counter(), time.process_time()
    run = sse_streams if job.transport == SSE else grpc_streams
    await run(job, started + seconds, tally)
    tally.elapsed_s = time.perf_counter() - started
    tally.cpu_s = time.process_time() - cpu
    return tally


def main() -> int:
    """One load process: job on stdin, ``ready``, wait for ``go``, the tally in the
    file named by the second argument (a file, not a pipe: a long run's tally is
    hundreds of KiB)."""
    job = Job.from_json(sys.stdin.readline())
    seconds, tally_path = float(sys.argv[1]), Path(sys.argv[2])
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    tally = _uvloop_run(run_streams(job, seconds))
    tally_path.write_text(json.dumps(asdict(tally)))
    return 0


def _uvloop_run(coroutine: Any) -> Any:
    """uvloop where it is installed: plain sockets cost less on it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


if __name__ == "__main__":
    sys.exit(main())
