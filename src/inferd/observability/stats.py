"""What the server counts while it serves: recorded on the hot path, read on demand.

Recording is plain Python arithmetic on slotted objects (no locks, no labels to
look up, no strings built): every recording call runs on the event loop thread
of the main process, and readers (the statistics extension, the Prometheus
collectors in :mod:`inferd.observability.metrics`) run on that thread too, so they always see
a consistent picture. Durations are recorded in nanoseconds
(``time.perf_counter_ns``) for the statistics extension and in seconds for the
histograms.

- :class:`ModelStats`: one per model version (Triton's statistics extension plus
  the per-model Prometheus metrics). Kept by (name, version) in a
  :class:`ModelStatsTable`, so a reloaded model keeps counting.
- :class:`HttpStats`: REST requests by method, route template and status.
- :class:`GrpcStats`: gRPC calls by method and status code.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from inferd.observability.histogram import (
    BATCH_BUCKETS,
    DURATION_BUCKETS,
    LOAD_BUCKETS,
    NS_PER_SECOND,
    STREAM_RESPONSE_BUCKETS,
    TOKEN_RATE_BUCKETS,
    Histogram,
)


class ModelStats:
    """Everything counted for one model version.

    Per request, the data plane records the outcome (:meth:`succeeded` /
    :meth:`failed`) and the scheduler, for a successful one, how long it waited for
    a worker slot and then computed (:meth:`waited`, :meth:`computed`); per batch
    sent to the pool, the scheduler calls :meth:`executed`. Queue and
    compute figures count successful requests only, as Triton's do. The histograms
    exist for Prometheus alone: with ``observe`` false (metrics off) they are not
    kept, and only the counters of the statistics extension are.
    """

    __slots__ = (
        "batch_counts",
        "batch_size",
        "cache_hit_count",
        "cache_hit_ns",
        "cache_miss_count",
        "cache_miss_ns",
        "compute_count",
        "compute_ns",
        "duration",
        "execution_count",
        "fail_count",
        "fail_ns",
        "first_response",
        "generated_tokens",
        "inference_count",
        "inter_token",
        "last_inference_ns",
        "load",
        "name",
        "observe",
        "prompt_tokens",
        "queue_count",
        "queue_ns",
        "queue_wait",
        "stream_responses",
        "streams_open",
        "success_count",
        "success_ns",
        "timeouts",
        "token_rate",
        "version",
    )

    def __init__(self, name: str, version: str | None, observe: bool = True) -> None:
        self.name = name
        self.version = version or ""
        self.observe = observe
        self.success_count = 0
        self.success_ns = 0
        self.fail_count = 0
        self.fail_ns = 0
        self.queue_count = 0
        self.queue_ns = 0
        self.compute_count = 0
        self.compute_ns = 0
        self.execution_count = 0
        self.inference_count = 0
        # time.perf_counter_ns() of the latest request's end; 0: none yet.
        self.last_inference_ns = 0
        # Batch size (rows) -> executions of that size.
        self.batch_counts: dict[int, int] = {}
        self.duration = Histogram(DURATION_BUCKETS)
        self.queue_wait = Histogram(DURATION_BUCKETS)
        self.batch_size = Histogram(BATCH_BUCKETS)
        # Streams (predict_stream): open now, time to their first response, responses each.
        self.streams_open = 0
        self.first_response = Histogram(DURATION_BUCKETS)
        self.stream_responses = Histogram(STREAM_RESPONSE_BUCKETS)
        self.load = Histogram(LOAD_BUCKETS)  # every load's seconds, however it was asked
        # Tokens of the OpenAI-compatible endpoints' completions (server/openai/).
        self.prompt_tokens = 0
        self.generated_tokens = 0
        # ... the time between their consecutive tokens, and each completion's tokens per second.
        self.inter_token = Histogram(DURATION_BUCKETS)
        self.token_rate = Histogram(TOKEN_RATE_BUCKETS)
        # Calls killed for running past the model's inference_timeout.
        self.timeouts = 0
        # The response cache (serving/response_cache.py): lookups answered from it, and not.
        self.cache_hit_count = 0
        self.cache_hit_ns = 0
        self.cache_miss_count = 0
        self.cache_miss_ns = 0

    def loaded(self, seconds: float) -> None:  # a load of this version took ``seconds``
        if self.observe:
            self.load.observe(seconds)

    def stream_opened(self) -> None:
        self.streams_open += 1

    def stream_first_response(self, elapsed_ns: int) -> None:
        if self.observe:
            self.first_response.observe(elapsed_ns / NS_PER_SECOND)

    def stream_closed(self, responses: int) -> None:
        """A stream ended (whole, failed or left) after sending ``responses``."""
        self.streams_open -= 1
        if self.observe:
            self.stream_responses.observe(responses)

    def tokens(self, prompt: int, generated: int) -> None:
        """A completion read ``prompt`` tokens and generated ``generated``."""
        self.prompt_tokens += prompt
        self.generated_tokens += generated

    def tokens_came(self, tokens: int, gap_ns: int) -> None:
        """``tokens`` tokens of a completion came together, ``gap_ns`` after its previous
        ones: each counts as an equal share of the gap (what a reader of the stream saw)."""
        if self.observe:
            self.inter_token.observe(gap_ns / tokens / NS_PER_SECOND, tokens)

    def completion_ended(self, tokens: int, elapsed_ns: int) -> None:
        """A completion generated ``tokens`` in ``elapsed_ns`` from its arrival."""
        if self.observe and tokens and elapsed_ns > 0:
            self.token_rate.observe(tokens * NS_PER_SECOND / elapsed_ns)

    def succeeded(self, started_ns: int, ended_ns: int) -> None:
        """A request answered; both times from ``time.perf_counter_ns()``."""
        self.success_count += 1
        self.success_ns += self._ended(started_ns, ended_ns)

    def failed(self, started_ns: int, ended_ns: int) -> None:
        self.fail_count += 1
        self.fail_ns += self._ended(started_ns, ended_ns)

    def _ended(self, started_ns: int, ended_ns: int) -> int:
        """What every answered request records, failed or not; its duration in ns."""
        elapsed = ended_ns - started_ns
        self.last_inference_ns = ended_ns
        if self.observe:
            self.duration.observe(elapsed / NS_PER_SECOND)
        return elapsed

    def timed_out(self) -> None:
        """A call of the model ran past its inference_timeout (its worker was killed)."""
        self.timeouts += 1

    def cache_hit(self, lookup_ns: int) -> None:
        """A request was answered from the response cache; its lookup took ``lookup_ns``."""
        self.cache_hit_count += 1
        self.cache_hit_ns += lookup_ns

    def cache_missed(self, lookup_ns: int) -> None:
        """A request was looked up in the response cache and not found there."""
        self.cache_miss_count += 1
        self.cache_miss_ns += lookup_ns

    def cache_stored(self, insert_ns: int) -> None:
        """A missed request's answer went into the cache (its time counts to the miss)."""
        self.cache_miss_ns += insert_ns

    def waited(self, queue_ns: int) -> None:
        """A request got a worker slot after waiting ``queue_ns`` for it."""
        self.queue_count += 1
        self.queue_ns += queue_ns
        if self.observe:
            self.queue_wait.observe(queue_ns / NS_PER_SECOND)

    def computed(self, compute_ns: int) -> None:
        """A request's execution (alone or in a batch) answered after ``compute_ns``."""
        self.compute_count += 1
        self.compute_ns += compute_ns

    def executed(self, rows: int, requests: int) -> None:
        """A batch of ``rows`` rows from ``requests`` requests went to the pool."""
        self.execution_count += 1
        self.inference_count += rows
        self.batch_counts[rows] = self.batch_counts.get(rows, 0) + 1
        if self.observe:
            self.batch_size.observe(rows)

    @property
    def last_inference_ms(self) -> int:
        """When the latest request ended, in milliseconds since the epoch (0: never)."""
        if not self.last_inference_ns:
            return 0
        wall_ns = self.last_inference_ns + time.time_ns() - time.perf_counter_ns()
        return wall_ns // 1_000_000

    def to_dict(self) -> dict[str, Any]:
        """Triton's ``ModelStatistics`` as JSON (the REST statistics extension).

        inferd converts tensors in the wire layer and in the worker as part of the
        call, so ``compute_input`` / ``compute_output`` stay zero and
        ``compute_infer`` holds the whole execution, per request. ``batch_stats``
        counts executions per batch size; their time is not split by size (0 ns).
        ``cache_hit`` / ``cache_miss`` count response cache lookups as Triton does:
        a hit's time is its lookup, a miss's its lookup plus storing its answer. A hit
        counts in ``success`` but runs nothing, so it adds no execution or inference.
        """
        zero = _duration(0, 0)
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": _duration(self.success_count, self.success_ns),
                "fail": _duration(self.fail_count, self.fail_ns),
                "queue": _duration(self.queue_count, self.queue_ns),
                "compute_input": zero,
                "compute_infer": _duration(self.compute_count, self.compute_ns),
                "compute_output": zero,
                "cache_hit": _duration(self.cache_hit_count, self.cache_hit_ns),
                "cache_miss": _duration(self.cache_miss_count, self.cache_miss_ns),
            },
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": zero,
                    "compute_infer": _duration(count, 0),
                    "compute_output": zero,
                }
                for size, count in sorted(self.batch_counts.items())
            ],
            "memory_usage": [],
        }


def _duration(count: int, ns: int) -> dict[str, int]:
    return {"count": count, "ns": ns}


def rows_of(inputs: list[Any]) -> int:
    """Rows in a request: the first input's first dimension (1 for a scalar)."""
    if not inputs:
        return 1
    shape = inputs[0].data.shape
    return int(shape[0]) if shape else 1


class ModelStatsTable:
    """The :class:`ModelStats` of every model version served since start-up."""

    def __init__(self, observe: bool = True) -> None:
        self.observe = observe  # keep the histograms (metrics are on)
        self._by_version: dict[tuple[str, str | None], ModelStats] = {}

    def of(self, name: str, version: str | None) -> ModelStats:
        stats = self._by_version.get((name, version))
        if stats is None:
            stats = ModelStats(name, version, self.observe)
            self._by_version[(name, version)] = stats
        return stats

    def __iter__(self) -> Iterator[ModelStats]:
        return iter(list(self._by_version.values()))


# REST


class RouteStats:
    """Requests to one route (method and path template), by status code."""

    __slots__ = ("by_status", "method", "path")

    def __init__(self, method: str, path: str) -> None:
        self.method = method
        self.path = path
        self.by_status: dict[int, Histogram] = {}

    def finished(self, status: int, seconds: float) -> None:
        durations = self.by_status.get(status)
        if durations is None:
            durations = self.by_status[status] = Histogram(DURATION_BUCKETS)
        durations.observe(seconds)


class InProgress:
    """Requests of one method being served right now."""

    __slots__ = ("count", "method")

    def __init__(self, method: str) -> None:
        self.method = method
        self.count = 0


class HttpStats:
    """REST requests by route; requests in progress by method."""

    # The path label of requests that match no route, so that unknown paths (typos,
    # scanners) cannot create new label values.
    UNMATCHED = "<unmatched>"

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str], RouteStats] = {}
        self._in_progress: dict[str, InProgress] = {}

    def route(self, method: str, path: str) -> RouteStats:
        route = self._routes.get((method, path))
        if route is None:
            route = self._routes[(method, path)] = RouteStats(method, path)
        return route

    def routes(self) -> list[RouteStats]:
        return list(self._routes.values())

    def in_progress_of(self, method: str) -> InProgress:
        in_progress = self._in_progress.get(method)
        if in_progress is None:
            in_progress = self._in_progress[method] = InProgress(method)
        return in_progress

    def in_progress(self) -> list[InProgress]:
        return list(self._in_progress.values())


# gRPC


class GrpcMethodStats:
    """Calls of one gRPC method: started, handled by status code, handling time."""

    __slots__ = ("durations", "handled", "kind", "method", "service", "started")

    def __init__(self, service: str, method: str, kind: str) -> None:
        self.service = service
        self.method = method
        self.kind = kind  # unary, server_stream, client_stream or bidi_stream
        self.started = 0
        self.handled: dict[str, int] = {}
        self.durations = Histogram(DURATION_BUCKETS)

    def finished(self, code: str, seconds: float) -> None:
        self.handled[code] = self.handled.get(code, 0) + 1
        self.durations.observe(seconds)


class GrpcStats:
    def __init__(self) -> None:
        self._methods: dict[tuple[str, str], GrpcMethodStats] = {}

    def method(self, service: str, method: str, kind: str = "unary") -> GrpcMethodStats:
        stats = self._methods.get((service, method))
        if stats is None:
            stats = self._methods[(service, method)] = GrpcMethodStats(service, method, kind)
        return stats

    def methods(self) -> list[GrpcMethodStats]:
        return list(self._methods.values())
