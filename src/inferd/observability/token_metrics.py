"""The token metrics of the OpenAI-compatible endpoints (server/openai/), per model:
prompt tokens read and tokens generated, as the model's tokenizer counts them; the
time between consecutive tokens of a completion and each completion's tokens per
second (the time to the first token is ``model_stream_first_response_seconds``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from inferd.observability.histogram import Histogram
from inferd.observability.stats import ModelStatsTable

_LABELS = ("model_name", "model_version")


def token_families(models: ModelStatsTable) -> Iterator[Metric]:
    prompt = CounterMetricFamily(
        "model_prompt_tokens", "Prompt tokens of completions (/v1/...)", labels=_LABELS
    )
    generated = CounterMetricFamily(
        "model_generated_tokens", "Tokens generated for completions (/v1/...)", labels=_LABELS
    )
    inter_token = HistogramMetricFamily(
        "model_inter_token_seconds",
        "Time between consecutive tokens of a completion (/v1/...)",
        labels=_LABELS,
    )
    rate = HistogramMetricFamily(
        "model_completion_tokens_per_second",
        "Tokens each completion generated per second, from its arrival to its last token",
        labels=_LABELS,
    )
    for stats in models:
        labels = (stats.name, stats.version)
        prompt.add_metric(labels, stats.prompt_tokens)
        generated.add_metric(labels, stats.generated_tokens)
        _add(inter_token, labels, stats.inter_token)
        _add(rate, labels, stats.token_rate)
    yield prompt
    yield generated
    yield inter_token
    yield rate


def _add(family: HistogramMetricFamily, labels: tuple[str, str], histogram: Histogram) -> None:
    buckets = [(floatToGoString(bound), count) for bound, count in histogram.cumulative()]
    family.add_metric(labels, buckets, histogram.sum)
