"""The streaming load: several client processes, each keeping a few streams going.

:class:`StreamLoad` is a :class:`~benchmarks.loadgen.Load` like wrk and h2load, but
its unit is the response: every stream asks for N responses, each client process
(``python -m benchmarks.streamclient``) checks that each of its streams got exactly
0..N-1 in order, and only right streams count. The processes start (import)
first, then all are told to go at once, so their start-up is not measured. Several
processes, because one Python client would be the bottleneck long before a server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import numpy as np

from .loadgen import LoadResult, Target, latency_figures
from .streamclient import GRPC, KEPT_PROBLEMS, SSE, Job

ROOT = Path(__file__).resolve().parent.parent  # where ``-m benchmarks.streamclient`` runs
READY_TIMEOUT = 60.0
TRANSPORTS = (GRPC, SSE)


@dataclass(frozen=True)
class StreamTarget(Target):
    """A streaming endpoint: ``url`` is the infer_stream URL (SSE) or the
    ModelStreamInfer method's (gRPC); ``body`` a JSON request or a serialized
    ModelInferRequest asking for ``responses`` responses."""

    transport: str = SSE
    responses: int = 100
    wrapped: bool = True  # gRPC answers are ModelStreamInferResponses (MLServer: bare)
    final_response: bool = False  # the request asks for an empty final response


@dataclass(frozen=True)
class StreamResult(LoadResult):
    """``requests`` counts responses (``requests_per_s``: responses/s); latencies are
    per stream, from its request to its last response."""

    unit: ClassVar[str] = "resp"
    streams: int
    failed_streams: int
    problems: tuple[str, ...]
    first_response_p50_ms: float
    client_cpu_us_per_response: float | None

    @property
    def errors(self) -> int:
        """Streams that failed or did not get exactly 0..N-1 in order."""
        return self.failed_streams

    def detail(self) -> str:
        cpu = self.client_cpu_us_per_response
        client = f", load CPU {cpu:.1f} us/resp" if cpu is not None else ""
        return (
            f"  [{self.streams} streams, first response p50 "
            f"{self.first_response_p50_ms:.2f} ms{client}]"
        )


def split_streams(streams: int, clients: int) -> list[int]:
    """``streams`` concurrent streams over at most ``clients`` processes, as evenly as
    can be (no process without a stream)."""
    if streams < 1 or clients < 1:
        raise ValueError("streams and clients must be >= 1")
    used = min(streams, clients)
    return [streams // used + (1 if i < streams % used else 0) for i in range(used)]


def job_for(target: StreamTarget, streams: int) -> Job:
    where = urlsplit(target.url)
    if where.hostname is None or where.port is None:
        raise ValueError(f"{target.url}: no host and port")
    return Job(
        transport=target.transport,
        host=where.hostname,
        port=where.port,
        path=where.path,
        body=target.body,
        responses=target.responses,
        streams=streams,
        wrapped=target.wrapped,
        final_response=target.final_response,
    )


def combine(tallies: Sequence[Mapping[str, Any]]) -> StreamResult:
    """The clients' tallies as one result: responses over the longest client's time."""
    responses = sum(int(t["responses"]) for t in tallies)
    elapsed = max((float(t["elapsed_s"]) for t in tallies), default=0.0)
    stream_ms = np.array([ms for t in tallies for ms in t["stream_ms"]], dtype=float)
    first_ms = np.array([ms for t in tallies for ms in t["first_ms"]], dtype=float)
    cpu = sum(float(t["cpu_s"]) for t in tallies)
    return StreamResult(
        **latency_figures(stream_ms, responses, elapsed),
        streams=sum(int(t["streams"]) for t in tallies),
        failed_streams=sum(int(t["failed"]) for t in tallies),
        problems=tuple(p for t in tallies for p in t["problems"])[:KEPT_PROBLEMS],
        first_response_p50_ms=float(np.median(first_ms)) if first_ms.size else 0.0,
        client_cpu_us_per_response=cpu / responses * 1e6 if responses else None,
    )


@dataclass(frozen=True)
class StreamLoad:
    """``connections`` concurrent streams spread over ``clients`` processes."""

    connections: int
    clients: int = 2
    name: str = "streams"

    def run(self, target: Target, seconds: float, rate_hint: float | None = None) -> StreamResult:
        if not isinstance(target, StreamTarget):
            raise TypeError(f"a streaming load needs a StreamTarget, not {target!r}")
        jobs = [job_for(target, n) for n in split_streams(self.connections, self.clients)]
        with tempfile.TemporaryDirectory(prefix="inferd-streamload-") as folder:
            clients = [
                Client.start(job, seconds, Path(folder) / f"{i}.log") for i, job in enumerate(jobs)
            ]
            try:
                for client in clients:
                    client.expect("ready")
                for client in clients:
                    client.send("go")
                tallies = [client.tally(seconds + READY_TIMEOUT) for client in clients]
            finally:
                for client in clients:
                    client.stop()
        return combine(tallies)


@dataclass(frozen=True)
class Client:
    """One ``python -m benchmarks.streamclient`` process, talked to by lines."""

    process: subprocess.Popen[str]
    log: Path  # its stderr
    tally_path: Path  # where it writes its tally

    @classmethod
    def start(cls, job: Job, seconds: float, log: Path) -> Client:
        path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
        tally_path = log.with_suffix(".tally.json")
        with log.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.streamclient", f"{seconds}", str(tally_path)],
                cwd=ROOT,
                env=os.environ | {"PYTHONPATH": path},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        client = cls(process, log, tally_path)
        client.send(job.to_json())
        return client

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def expect(self, expected: str) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if line != expected:
            raise RuntimeError(f"stream client said {line!r}, not {expected!r}:\n{self.tail()}")

    def tally(self, timeout: float) -> dict[str, Any]:
        try:
            self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"a stream client did not finish:\n{self.tail()}") from None
        if self.process.returncode != 0 or not self.tally_path.exists():
            raise RuntimeError(f"stream client exited {self.process.returncode}:\n{self.tail()}")
        tally: dict[str, Any] = json.loads(self.tally_path.read_text())
        return tally

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
