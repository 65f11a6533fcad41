"""A streaming chat-completions load: N streams at once, each asking again when done.

Every stream is ``POST /v1/chat/completions`` with ``stream: true``, read as
server-sent events (httpx's bytes, split by the one SSE parser, benchmarks.sse):
the time of each chunk that carries text is taken as it arrives, and a stream
counts only when it is right (HTTP 200, every event a JSON chunk or the final
``data: [DONE]``, at least one token, a ``finish_reason``). Figures: time to
first token (request sent to first text chunk), tokens/s over the whole run (the
usage chunk's ``completion_tokens`` asked for with ``stream_options.include_usage``;
a server that reports none, or 0, is counted by its text chunks, one per token
when it flushes each token as it is made), per-stream inter-token latency
(between text chunks), and goodput: the streams per second that met the latency
target (time to first token under 1 s and time per output token, (last - first
token) / (tokens - 1), under 100 ms). Closed-loop (each stream asks again when
done) or open-loop (``rate``: Poisson arrivals, a stream's clock starting at its
arrival, at most ``streams`` in flight, as vLLM's benchmark_serving's
--request-rate and --max-concurrency). Parsing and statistics are apart from the
network so they are tested alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from .loadgen import LoadResult, Target
from .sse import EVENT_END, MESSAGE, SseEvent, SseSplitter

TTFT_TARGET_S = 1.0  # goodput's latency target
TPOT_TARGET_S = 0.100
DONE = "[DONE]"
REQUEST_TIMEOUT_S = 60.0


class ChatStreamError(ValueError):
    """A stream that is not a right chat-completions stream."""


@dataclass
class StreamRecord:
    """One stream as the client saw it: when it was sent and when each token came."""

    sent_at: float
    token_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    done: bool = False
    completion_tokens: int = 0  # the usage chunk's; 0: none reported

    @property
    def tokens(self) -> int:
        """Tokens generated: the server's count, else the text chunks."""
        return self.completion_tokens or len(self.token_times)

    def add_event(self, data: str, now: float) -> None:
        """One ``data:`` payload; ChatStreamError when it is not a chunk or [DONE]."""
        if self.done:
            raise ChatStreamError(f"an event after [DONE]: {data[:200]!r}")
        if data == DONE:
            self.done = True
            return
        try:
            chunk = json.loads(data)
            choices = chunk["choices"]
        except (ValueError, KeyError, TypeError):
            raise ChatStreamError(f"not a chat.completion.chunk: {data[:200]!r}") from None
        if chunk.get("object") != "chat.completion.chunk":
            raise ChatStreamError(f"object is {chunk.get('object')!r}: {data[:200]!r}")
        usage = chunk.get("usage") or {}
        self.completion_tokens = int(usage.get("completion_tokens") or self.completion_tokens)
        for choice in choices:  # the usage chunk has none
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.token_times.append(now)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def time_per_output_token(self) -> float:
        """Seconds per token after the first (0 for a stream of one text chunk)."""
        later = self.tokens - 1
        return (self.token_times[-1] - self.token_times[0]) / later if later > 0 else 0.0

    def met_target(self) -> bool:
        """Within goodput's latency target (TTFT and time per output token)."""
        ttft = self.token_times[0] - self.sent_at
        return ttft < TTFT_TARGET_S and self.time_per_output_token() < TPOT_TARGET_S

    def problem(self) -> str | None:
        """Why the finished stream is wrong; None when it is right."""
        if not self.done:
            return "no data: [DONE]"
        if not self.token_times:
            return "no token"
        if self.finish_reason not in ("stop", "length"):
            return f"finish_reason {self.finish_reason!r}"
        return None


def chat_data(event: SseEvent) -> str:
    """The data of a chat stream's event; ChatStreamError when it is not a data event."""
    if event.kind != MESSAGE:
        raise ChatStreamError(f"not a data event: {event.kind} {event.data[:200]!r}")
    return event.data.decode().strip()


@dataclass(frozen=True)
class ChatResult(LoadResult):
    """Tokens (``requests``) per second; p50..max: time to first token."""

    unit = "tok"
    streams: int  # right streams finished in the run
    bad_streams: int
    itl_p50_ms: float
    itl_p99_ms: float
    goodput_per_s: float  # right streams within the latency target, per second

    @property
    def errors(self) -> int:
        return self.bad_streams

    def detail(self) -> str:
        each = self.requests / max(self.streams, 1)
        per_s = self.streams / self.duration_s if self.duration_s > 0 else 0.0
        return (
            f"  streams {self.streams} ({per_s:.1f}/s, {each:.1f} tok each)"
            f"  TTFT p50/p99 {self.p50_ms:.1f}/{self.p99_ms:.1f} ms"
            f"  ITL p50/p99 {self.itl_p50_ms:.2f}/{self.itl_p99_ms:.2f} ms"
            f"  goodput {self.goodput_per_s:.1f}/s"
        )


def percentile_ms(values: list[float], q: float) -> float:
    return float(np.percentile(values, q) * 1e3) if values else 0.0


def chat_result(records: list[StreamRecord], bad: int, duration_s: float) -> ChatResult:
    """The run's figures from its right streams."""
    ttft = [r.token_times[0] - r.sent_at for r in records]
    gaps = [float(g) for r in records for g in np.diff(r.token_times)]
    tokens = sum(r.tokens for r in records)
    return ChatResult(
        requests=tokens,
        duration_s=duration_s,
        requests_per_s=tokens / duration_s if duration_s > 0 else 0.0,
        p50_ms=percentile_ms(ttft, 50),
        p90_ms=percentile_ms(ttft, 90),
        p99_ms=percentile_ms(ttft, 99),
        mean_ms=float(np.mean(ttft) * 1e3) if ttft else 0.0,
        max_ms=max(ttft, default=0.0) * 1e3,
        streams=len(records),
        bad_streams=bad,
        itl_p50_ms=percentile_ms(gaps, 50),
        itl_p99_ms=percentile_ms(gaps, 99),
        goodput_per_s=sum(r.met_target() for r in records) / duration_s if duration_s else 0.0,
    )


async def arrivals(rate: float, deadline: float) -> AsyncIterator[float]:
    """Poisson arrival times, ``rate`` a second, until ``deadline`` (perf_counter)."""
    generator = np.random.default_rng(0)
    now = time.perf_counter()
    while (now := now + float(generator.exponential(1 / rate))) < deadline:
        await asyncio.sleep(max(0.0, now - time.perf_counter()))
        yield now


async def one_stream(
    client: httpx.AsyncClient, url: str, body: bytes, arrived: float | None = None
) -> StreamRecord:
    """Send one request and read its stream; ChatStreamError when it is wrong. Its
    clock starts at ``arrived`` (open-loop: waiting for a free stream counts)."""
    record = StreamRecord(time.perf_counter() if arrived is None else arrived)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    async with client.stream("POST", url, content=body, headers=headers) as answer:
        if answer.status_code != 200:
            text = (await answer.aread()).decode(errors="replace")
            raise ChatStreamError(f"HTTP {answer.status_code}: {text[:300]}")
        events = SseSplitter()
        async for piece in answer.aiter_bytes():
            for event in events.feed(piece):
                record.add_event(chat_data(event), time.perf_counter())
        for event in events.feed(EVENT_END):  # a last event without its blank line
            record.add_event(chat_data(event), time.perf_counter())
    problem = record.problem()
    if problem:
        raise ChatStreamError(problem)
    return record


async def drive(
    url: str, body: bytes, streams: int, seconds: float, rate: float | None = None
) -> ChatResult:
    """``streams`` loops, each starting a new stream until ``seconds`` have passed; with
    ``rate``, streams arriving at random (Poisson, ``rate`` a second) for ``seconds``,
    at most ``streams`` at once (an arrival waits for a free one, on its own clock)."""
    good: list[StreamRecord] = []
    bad: list[str] = []
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
        start = time.perf_counter()
        deadline = start + seconds
        free = asyncio.Semaphore(streams)

        async def one(arrived: float | None = None) -> None:
            try:
                async with free:
                    good.append(await one_stream(client, url, body, arrived))
            except (ChatStreamError, httpx.HTTPError) as error:
                bad.append(str(error))

        async def loop() -> None:
            while time.perf_counter() < deadline:
                await one()

        if rate is None:
            await asyncio.gather(*(loop() for _ in range(streams)))
        else:
            await asyncio.gather(
                *[asyncio.ensure_future(one(t)) async for t in arrivals(rate, deadline)]
            )
        elapsed = time.perf_counter() - start
    if bad:
        print(f"    {len(bad)} wrong streams, first: {bad[0]}", flush=True)
    return chat_result(good, len(bad), elapsed)


def chat_body(model: str, max_tokens: int, prompt: str) -> bytes:
    request: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return json.dumps(request).encode()


@dataclass(frozen=True)
class ChatLoad:
    """``streams`` concurrent streaming chat completions: closed-loop, or open-loop at
    ``rate`` streams a second (at most ``streams`` at once)."""

    streams: int
    rate: float | None = None

    @property
    def name(self) -> str:
        if self.rate is not None:
            return f"chat streams at {self.rate:g}/s, at most {self.streams} at once"
        return f"{self.streams} concurrent chat streams"

    def run(self, target: Target, seconds: float, rate_hint: float | None) -> ChatResult:
        return asyncio.run(drive(target.url, target.body, self.streams, seconds, self.rate))
