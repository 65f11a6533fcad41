"""The token counters of the OpenAI-compatible endpoints (server/openai/), per model:
prompt tokens read and tokens generated, as the model's tokenizer counts them."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from inferd.observability.stats import ModelStatsTable

_LABELS = ("model_name", "model_version")


def token_families(models: ModelStatsTable) -> Iterator[Metric]:
    prompt = CounterMetricFamily(
        "model_prompt_tokens", "Prompt tokens of completions (/v1/...)", labels=_LABELS
    )
    generated = CounterMetricFamily(
        "model_generated_tokens", "Tokens generated for completions (/v1/...)", labels=_LABELS
    )
    for stats in models:
        labels = (stats.name, stats.version)
        prompt.add_metric(labels, stats.prompt_tokens)
        generated.add_metric(labels, stats.generated_tokens)
    yield prompt
    yield generated
