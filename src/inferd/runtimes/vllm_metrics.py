"""vLLM's engine figures as inferd metrics, under vLLM's own names.

vLLM's ``AsyncLLM`` hands each engine step's statistics to its stat loggers (in the
process that runs it); :class:`EngineFigures` is one, and logs them as custom metrics
(inferd/custom_metrics.py) labelled ``model_name`` and ``model_version``, exported on
the server's metrics endpoint:

- ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``
  (histograms): each request's first token, each token after it;
- ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` (gauges): sequences in
  the running batch, and queued in the engine;
- ``vllm:kv_cache_usage_perc`` (gauge, 0 to 1): the share of the KV cache in use;
- ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:prefix_cache_queries_total``, ``vllm:prefix_cache_hits_total``,
  ``vllm:request_success_total`` (counters).

From a worker process, values reach the endpoint with the worker's next reply.
vLLM calls the stat loggers from its output task: recording is a few appends, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferd import custom_metrics

LABELS = ("model_name", "model_version")
# vLLM's own buckets for its latency histograms (seconds).
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                   1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
METRICS = {
    "vllm:time_to_first_token_seconds": ("histogram", "Time to first token"),
    "vllm:inter_token_latency_seconds": ("histogram", "Time between tokens of a sequence"),
    "vllm:num_requests_running": ("gauge", "Sequences in the engine's running batch"),
    "vllm:num_requests_waiting": ("gauge", "Requests waiting in the engine"),
    "vllm:kv_cache_usage_perc": ("gauge", "Share of the KV cache in use (1: full)"),
    "vllm:prompt_tokens": ("counter", "Prompt tokens the engine read"),
    "vllm:generation_tokens": ("counter", "Tokens the engine generated"),
    "vllm:prefix_cache_queries": ("counter", "Prompt tokens looked up in the prefix cache"),
    "vllm:prefix_cache_hits": ("counter", "Prompt tokens found in the prefix cache"),
    "vllm:request_success": ("counter", "Requests the engine ended (done or aborted)"),
}


def register() -> None:
    for name, (kind, description) in METRICS.items():
        buckets = LATENCY_BUCKETS if kind == "histogram" else None
        custom_metrics.register(name, description, kind, buckets=buckets, labelnames=LABELS)


class EngineFigures:
    """A vLLM stat logger (``StatLoggerBase``'s methods) that logs inferd metrics."""

    def __init__(self, model: str, version: str) -> None:
        self.labels = (model, version)
        register()

    def _log(self, name: str, value: float) -> None:
        custom_metrics.log_labelled(name, self.labels, value)

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is not None:
            self._log("vllm:num_requests_running", scheduler_stats.num_running_reqs)
            self._log("vllm:num_requests_waiting", scheduler_stats.num_waiting_reqs)
            self._log("vllm:kv_cache_usage_perc", scheduler_stats.kv_cache_usage)
            cache = getattr(scheduler_stats, "prefix_cache_stats", None)
            if cache is not None and cache.queries:
                self._log("vllm:prefix_cache_queries", cache.queries)
                self._log("vllm:prefix_cache_hits", cache.hits)
        if iteration_stats is not None:
            self._iteration(iteration_stats)

    def _iteration(self, stats: Any) -> None:
        prompt = getattr(getattr(stats, "prompt_token_stats", None), "total", 0)
        if prompt:
            self._log("vllm:prompt_tokens", prompt)
        if stats.num_generation_tokens:
            self._log("vllm:generation_tokens", stats.num_generation_tokens)
        for seconds in stats.time_to_first_tokens_iter:
            self._log("vllm:time_to_first_token_seconds", seconds)
        for seconds in stats.inter_token_latencies_iter:
            self._log("vllm:inter_token_latency_seconds", seconds)
        if stats.finished_requests:
            self._log("vllm:request_success", len(stats.finished_requests))

    def log_engine_initialized(self) -> None:
        pass

    def log(self) -> None:
        pass

    def record_sleep_state(self, is_awake: int, level: int) -> None:
        pass


def stat_logger_factory(model: str, version: str) -> Callable[..., EngineFigures]:
    """What ``AsyncLLM``'s ``stat_loggers`` takes: one logger per engine."""

    def factory(vllm_config: Any, engine_index: int = 0) -> EngineFigures:
        return EngineFigures(model, version)

    return factory
