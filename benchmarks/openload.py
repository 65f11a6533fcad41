"""An open-loop HTTP/1.1 load: requests sent at a fixed rate, whatever the answers.

wrk and h2load are closed-loop: a connection sends its next request when the
previous answer is in, so a slow server slows its own load down. Overload is
the opposite: clients keep coming. :func:`drive` sends request ``i`` at time
``i / rate`` on an idle keep-alive connection, or on a new one (up to
``max_outstanding`` requests in flight; past that the request is counted as
not sent), and records every answer: status, latency, Retry-After and body.
The tools' HTTP/1.1 client (inferd.tools.leanhttp) on uvloop keeps the client's cost
per request low.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

import numpy as np
import uvloop

from .loadgen import LoadResult, Target, latency_figures
from .servers import group_rss_bytes

P = ParamSpec("P")
R = TypeVar("R")
TICK_S = 0.001  # how often the pacer looks at the clock


@dataclass(slots=True)
class Answer:
    """One request's fate."""

    index: int
    sent_at: float  # seconds since the load started
    latency_s: float
    status: int  # 0: no answer (connection lost or timed out)
    retry_after: float | None  # seconds (None: no Retry-After, or an HTTP date)
    body: bytes


@dataclass
class Drive:
    """What a run produced: every answer, and the requests that could not be sent."""

    answers: list[Answer] = field(default_factory=list)
    unsent: int = 0
    duration_s: float = 0.0


async def drive(
    url: str,
    body_of: Callable[[int], bytes],
    rate: float,
    seconds: float,
    max_outstanding: int = 1000,
    timeout_s: float = 30.0,
) -> Drive:
    """Send ``body_of(i)`` at ``i / rate`` seconds for ``seconds``; wait for the answers."""
    # Imported here: ``python -m benchmarks`` picks inferd's source tree before importing it.
    from inferd.tools.leanhttp import LeanHttpConnection
    from inferd.tools.v2client import Endpoint, http_post

    parts = urlsplit(url)
    endpoint = Endpoint(parts.hostname or "127.0.0.1", parts.port or 80)
    idle: list[LeanHttpConnection] = []
    run = Drive()
    in_flight: set[asyncio.Task[None]] = set()
    started = time.perf_counter()

    async def one(index: int, sent_at: float) -> None:
        # An idle keep-alive connection, else a new one (it reconnects if the server closed it).
        connection = idle.pop() if idle else LeanHttpConnection(endpoint, timeout_s)
        reply = await connection.exchange(http_post(endpoint, parts.path, body_of(index)))
        latency = time.perf_counter() - started - sent_at
        answer = Answer(index, sent_at, latency, reply.status, reply.retry_after, reply.body)
        run.answers.append(answer)
        idle.append(connection)

    total = int(rate * seconds)
    for index in range(total):
        due = index / rate
        while (now := time.perf_counter() - started) < due:
            await asyncio.sleep(min(TICK_S, due - now))
        if len(in_flight) >= max_outstanding:
            run.unsent += 1
            continue
        task = asyncio.ensure_future(one(index, now))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.wait(in_flight)
    run.duration_s = time.perf_counter() - started
    for connection in idle:
        await connection.close()
    return run


def on_own_loop(function: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """``function`` run to its end on a uvloop of its own (for callers without one)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return uvloop.run(function(*args, **kwargs))

    return run


run_drive = on_own_loop(drive)  # :func:`drive` for callers without a loop


# ------------------------------------------------------------- as a benchmark load


@dataclass(frozen=True)
class OpenLoadResult(LoadResult):
    """An open-loop run: ``requests`` counts the admitted (200) answers, and the
    latencies are theirs; refusals (503) are the server doing its job, not errors."""

    refused: int  # 503 answers
    refused_without_retry_after: int
    refused_p50_ms: float
    wrong: int  # 200 answers that were not the expected one
    failed: int  # other statuses, and requests without an answer (connection lost)
    unsent: int  # not sent: the client already had its most requests in flight
    rss_before_mib: float | None
    rss_after_mib: float | None

    @property
    def errors(self) -> int:
        return self.wrong + self.failed + self.refused_without_retry_after

    def detail(self) -> str:
        rss = ""
        if self.rss_before_mib is not None and self.rss_after_mib is not None:
            rss = f", server RSS {self.rss_before_mib:.0f} -> {self.rss_after_mib:.0f} MiB"
        return (
            f"\n      refused {self.refused} (p50 {self.refused_p50_ms:.1f} ms), "
            f"unsent {self.unsent}{rss}"
        )


@dataclass(frozen=True)
class OpenLoad:
    """``rate`` requests/s of the target's body, open-loop, for the harness; ``check``
    says whether an admitted answer's body is the right one. The server's memory
    (the target's process group) is read before and after."""

    rate: float
    check: Callable[[bytes], bool]
    max_outstanding: int = 2000
    timeout_s: float = 60.0
    name: str = "open-loop"

    def run(self, target: Target, seconds: float, rate_hint: float | None) -> OpenLoadResult:
        before = _rss_mib(target.server_pid)
        run = run_drive(
            target.url, lambda _: target.body, self.rate, seconds, self.max_outstanding,
            self.timeout_s,
        )  # fmt: skip
        return summarize_drive(run, self.check, before, _rss_mib(target.server_pid))


def summarize_drive(
    run: Drive, check: Callable[[bytes], bool], rss_before: float | None, rss_after: float | None
) -> OpenLoadResult:
    admitted = [a for a in run.answers if a.status == 200]
    refused = [a for a in run.answers if a.status == 503]
    latencies = [a.latency_s * 1e3 for a in admitted]
    refusals = np.array([a.latency_s * 1e3 for a in refused])
    return OpenLoadResult(
        **latency_figures(latencies, len(admitted), run.duration_s),
        refused=len(refused),
        refused_without_retry_after=sum(a.retry_after is None for a in refused),
        refused_p50_ms=float(np.median(refusals)) if refusals.size else 0.0,
        wrong=sum(not check(a.body) for a in admitted),
        failed=len(run.answers) - len(admitted) - len(refused),
        unsent=run.unsent,
        rss_before_mib=rss_before,
        rss_after_mib=rss_after,
    )


def _rss_mib(pid: int | None) -> float | None:
    resident = group_rss_bytes(pid) if pid is not None else None
    return resident / 2**20 if resident is not None else None
