"""The Hugging Face runtime's own decoding loop (runtimes/huggingface_generation.py)
on a tiny random chat LM and encoder, without a server."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.errors import InvalidParameter, InvalidRequest, ModelNotReady
from inferd.generation import ChatMessage, EmbeddingRequest, GenerationRequest, TextPiece
from inferd.runtimes.huggingface_generation import (
    Generation,
    mean_pooled,
    served_endpoints,
)
from tests.frameworks import require_module, save_tiny_text_classifier
from tests.support.tiny_llm import save_tiny_chat_lm

CHAT_TEMPLATE_WITHOUT_TOOLS = "{% for m in messages %}{{ m.content }} {% endfor %}"

transformers = require_module("transformers", "huggingface")
torch = require_module("torch", "huggingface")


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("lm") / "lm"
    save_tiny_chat_lm(folder)
    return transformers.pipeline("text-generation", model=str(folder))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder: Path = tmp_path_factory.mktemp("encoder") / "encoder"
    save_tiny_text_classifier(folder)
    return transformers.pipeline("feature-extraction", model=str(folder))


def generate(lm: Any, **fields: Any) -> list[TextPiece]:
    return list(Generation("lm", lm, torch).generate(GenerationRequest(**fields)))


def text(pieces: list[TextPiece]) -> str:
    return "".join(piece.text for piece in pieces)


def test_each_token_is_a_piece_and_the_last_counts(lm: Any) -> None:
    pieces = generate(lm, prompt="the movie was", max_tokens=6, temperature=0)
    *made, last = pieces
    assert len(made) >= 3  # token by token
    assert (last.finish_reason, last.prompt_tokens, last.completion_tokens) == ("length", 3, 6)


def test_seeded_sampling_repeats_and_seeds_differ(lm: Any) -> None:
    first = text(generate(lm, prompt="a", max_tokens=12, seed=1))
    assert text(generate(lm, prompt="a", max_tokens=12, seed=1)) == first
    others = {text(generate(lm, prompt="a", max_tokens=12, seed=s)) for s in range(2, 6)}
    assert others - {first}


def test_top_p_near_zero_is_greedy(lm: Any) -> None:
    greedy = text(generate(lm, prompt="the plot", max_tokens=8, temperature=0))
    assert text(generate(lm, prompt="the plot", max_tokens=8, top_p=1e-6, seed=3)) == greedy


def test_logprobs_are_the_models_raw_log_softmax(lm: Any) -> None:
    pieces = generate(lm, prompt="the movie was", max_tokens=5, temperature=0, logprobs=2)
    scored = [token for piece in pieces for token in piece.logprobs or []]
    assert len(scored) == pieces[-1].completion_tokens == 5
    ids = lm.tokenizer("the movie was", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logits = lm.model(ids).logits[0, -1]
    expected = torch.log_softmax(logits, dim=-1)
    first = int(expected.argmax())
    assert scored[0].token == lm.tokenizer.decode([first])
    assert scored[0].logprob == pytest.approx(float(expected[first]), abs=1e-5)
    assert scored[0].top[0].token == scored[0].token  # greedy: the likeliest
    assert len(scored[0].top) == 2
    assert all(piece.logprobs is None for piece in generate(lm, prompt="a", max_tokens=2))


def test_tools_go_to_a_template_that_takes_them(lm: Any) -> None:
    messages = [ChatMessage("user", "good film")]
    tool = {"type": "function", "function": {"name": "weather", "parameters": {}}}
    plain = generate(lm, messages=messages, max_tokens=1, temperature=0)[-1].prompt_tokens
    tooled = generate(lm, messages=messages, tools=[tool], max_tokens=1, temperature=0)
    assert tooled[-1].prompt_tokens == plain + 2  # <|system|> and the tool's name
    template = lm.tokenizer.chat_template
    lm.tokenizer.chat_template = CHAT_TEMPLATE_WITHOUT_TOOLS
    try:
        with pytest.raises(InvalidParameter, match="does not take tools") as refused:
            generate(lm, messages=messages, tools=[tool])
        assert refused.value.param == "tools"
    finally:
        lm.tokenizer.chat_template = template


def test_chat_uses_the_template_and_needs_one(lm: Any) -> None:
    messages = [ChatMessage("user", "good film")]
    pieces = generate(lm, messages=messages, max_tokens=4, temperature=0)
    assert pieces[-1].prompt_tokens == 4  # <|user|> good film <|assistant|>
    template, lm.tokenizer.chat_template = lm.tokenizer.chat_template, None
    try:
        assert served_endpoints({"task": "text-generation"}, lm) == ("completions",)
        with pytest.raises(InvalidRequest, match="chat template"):
            generate(lm, messages=messages)
    finally:
        lm.tokenizer.chat_template = template
    assert served_endpoints({"task": "text-generation"}, lm) == ("completions", "chat")
    assert served_endpoints({"task": "text-generation", "openai": False}, lm) == ()


@pytest.mark.parametrize(
    ("fields", "param", "reason"),
    [  # as OpenAI names them; the tiny LM's context is 256 tokens
        ({"prompt": "the " * 300}, "prompt", "context_length_exceeded"),
        ({"prompt": "the " * 200, "max_tokens": 100}, "prompt", "context_length_exceeded"),
        (
            {"messages": [ChatMessage("user", "the " * 200)], "max_tokens": 100},
            "messages",
            "context_length_exceeded",
        ),
        ({"prompt": "the", "max_tokens": 256}, "max_tokens", "invalid_value"),
        ({"prompt": "the", "max_tokens": 300}, "max_tokens", "invalid_value"),
    ],
)
def test_a_request_past_the_context_is_a_400_naming_the_field(
    lm: Any, fields: dict[str, Any], param: str, reason: str
) -> None:
    with pytest.raises(InvalidParameter, match="256 tokens") as refused:
        generate(lm, **fields)
    assert (refused.value.param, refused.value.reason) == (param, reason)
    generate(lm, prompt="the " * 200, max_tokens=50)  # what is left of the context: fine


def test_closing_the_stream_stops_generating(lm: Any) -> None:
    calls = 0
    model = lm.model
    forward = model.forward

    @functools.wraps(forward)  # the same signature: the loop reads it
    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return forward(*args, **kwargs)

    model.forward = counted
    try:
        stream = Generation("lm", lm, torch).generate(
            GenerationRequest(prompt="the", max_tokens=200, temperature=0)
        )
        next(stream)
        stream.close()
    finally:
        model.forward = forward
    assert calls < 5  # not the 200 forward passes a whole generation takes


def test_embeddings_mean_pool_at_the_model_s_own_width(encoder: Any) -> None:
    texts = ["the movie was good", "bad"]
    found = mean_pooled("e", encoder, torch, EmbeddingRequest(texts=texts))
    width = encoder.model.config.hidden_size
    assert found.vectors.shape == (2, width) and found.vectors.dtype == np.float32
    alone = mean_pooled("e", encoder, torch, EmbeddingRequest(texts=texts[1:]))
    np.testing.assert_allclose(alone.vectors[0], found.vectors[1], rtol=1e-4, atol=1e-5)
    # `dimensions` is the endpoint's (it cuts, or refuses a width past the model's):
    # the runtime answers its own width whatever was asked.
    wider = mean_pooled("e", encoder, torch, EmbeddingRequest(texts=texts, dimensions=width + 1))
    assert wider.vectors.shape == (2, width)
    with pytest.raises(ModelNotReady):
        mean_pooled("e", None, torch, EmbeddingRequest(texts=texts))
