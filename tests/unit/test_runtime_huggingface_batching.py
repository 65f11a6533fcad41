"""The Hugging Face runtime's continuous batching (runtimes/huggingface_batching.py): its
settings, and the per-request sampling it adds to transformers' engine."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from inferd.runtimes.huggingface_batching import (
    SAMPLING,
    EngineSettings,
    PerRequestSampling,
    RequestSampling,
)
from tests.frameworks import require_module

torch = require_module("torch", "huggingface")


def row(sampling: RequestSampling | None, new_token: bool = True) -> Any:
    """A request of a batch as the engine hands it to the processor."""
    state = SimpleNamespace(logit_processor_kwargs={SAMPLING: sampling} if sampling else {})
    return SimpleNamespace(state=state, has_new_token=new_token)


def seeded(temperature: float, top_p: float = 1.0, seed: int = 0) -> RequestSampling:
    return RequestSampling(temperature, top_p, torch.Generator().manual_seed(seed))


def picked(processor: PerRequestSampling, rows: list[Any], scores: Any) -> list[int]:
    """The tokens the engine's argmax takes after the processor."""
    storage = torch.zeros((3, 8), dtype=torch.int32)
    processor.prepare_tensor_args(rows, storage)
    processed = processor(None, scores.clone(), storage)
    return [int(token) for token in processed.argmax(dim=-1)]


SCORES = torch.tensor([[0.0, 3.0, 1.0, 2.9], [5.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.2]])


def test_greedy_rows_are_the_argmax_and_every_new_token_counts() -> None:
    processor = PerRequestSampling(torch)
    rows = [row(None), row(seeded(0.0)), row(None), row(None, new_token=False)]
    assert picked(processor, rows, SCORES) == [1, 0, 3]
    assert processor.generated == 3  # the row still prefilling made none


def test_sampling_rows_follow_their_seed_beside_greedy_ones() -> None:
    def draws(seed: int) -> list[int]:
        processor = PerRequestSampling(torch)
        sampling = seeded(1.0, seed=seed)
        return [picked(processor, [row(None), row(sampling)], SCORES[:2])[1] for _ in range(20)]

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)
    processor = PerRequestSampling(torch)
    sampling = seeded(5.0)
    assert {picked(processor, [row(sampling)], SCORES[:1])[0] for _ in range(50)} == {0, 1, 2, 3}


def test_top_p_keeps_the_nucleus_and_a_tiny_one_is_greedy() -> None:
    processor = PerRequestSampling(torch)
    nucleus = seeded(1.0, top_p=0.6)  # tokens 1 and 3 hold over 0.9 of the mass
    assert {picked(processor, [row(nucleus)], SCORES[:1])[0] for _ in range(50)} == {1, 3}
    tiny = seeded(1.0, top_p=1e-6)
    assert {picked(processor, [row(tiny)], SCORES[:1])[0] for _ in range(20)} == {1}


@pytest.mark.parametrize("value", [0, -1, "8", 2.5, True])
def test_engine_settings_must_be_whole_numbers_above_zero(value: Any) -> None:
    with pytest.raises(ValueError, match="kv_cache_tokens must be a whole number above 0"):
        EngineSettings.of("lm", {"kv_cache_tokens": value})
    assert EngineSettings.of("lm", {}) == EngineSettings(32, 8192)


def test_rows_that_ask_are_scored_with_the_token_the_engine_picks() -> None:
    processor = PerRequestSampling(torch)
    greedy = RequestSampling(0.0, 1.0, None, logprobs=2)
    sampled = seeded(5.0, seed=1)
    sampled.logprobs = 0
    rows = [row(greedy), row(None), row(sampled)]
    tokens = picked(processor, rows, SCORES)
    expected = torch.log_softmax(SCORES, dim=-1)  # the raw logits', before sampling
    (scored,) = greedy.scored
    assert scored.logprob == pytest.approx(float(expected[0, tokens[0]]))
    assert scored.top_ids == [1, 3]
    assert scored.top_logprobs == pytest.approx(expected[0, [1, 3]].tolist())
    (drawn,) = sampled.scored
    assert drawn.logprob == pytest.approx(float(expected[2, tokens[2]])) and drawn.top_ids == []
