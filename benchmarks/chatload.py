"""A streaming chat-completions load: N streams at once, each asking again when done.

Every stream is ``POST /v1/chat/completions`` with ``stream: true``, read as
server-sent events (httpx's bytes, split by the one SSE parser, benchmarks.sse):
the time of each chunk that carries text is taken as it arrives, and a stream
counts only when it is right (HTTP 200, every event a JSON chunk or the final
``data: [DONE]``, at least one token, a ``finish_reason``). Figures: time to
first token (request sent to first text chunk), tokens/s over the whole run (the
usage chunk's ``completion_tokens`` asked for with ``stream_options.include_usage``;
a server that reports none, or 0, is counted by its text chunks, one per token
when it flushes each token as it is made), and per-stream inter-token latency
(between text chunks). Parsing and statistics are apart from the network so they
are tested alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from .loadgen import LoadResult, Target
from .sse import EVENT_END, MESSAGE, SseEvent, SseSplitter

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
    )


async def one_stream(client: httpx.AsyncClient, url: str, body: bytes) -> StreamRecord:
    """Send one request and read its stream; ChatStreamError when it is wrong."""
    record = StreamRecord(time.perf_counter())
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


async def drive(url: str, body: bytes, streams: int, seconds: float) -> ChatResult:
    """``streams`` loops, each starting a new stream until ``seconds`` have passed."""
    good: list[StreamRecord] = []
    bad: list[str] = []
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
        start = time.perf_counter()
        deadline = start + seconds

        async def loop() -> None:
            while time.perf_counter() < deadline:
                try:
                    good.append(await one_stream(client, url, body))
                except (ChatStreamError, httpx.HTTPError) as error:
                    bad.append(str(error))

        await asyncio.gather(*(loop() for _ in range(streams)))
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
    """``streams`` concurrent streaming chat completions, closed-loop."""

    streams: int

    @property
    def name(self) -> str:
        return f"{self.streams} concurrent chat streams"

    def run(self, target: Target, seconds: float, rate_hint: float | None) -> ChatResult:
        return asyncio.run(drive(target.url, target.body, self.streams, seconds))
