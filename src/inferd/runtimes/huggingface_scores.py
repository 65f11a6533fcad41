"""Log probabilities of the Hugging Face runtime's generated tokens (OpenAI's
``logprobs``), in both of its decoding paths: from the logits of its own loop
(huggingface_generation.py) and, with continuous batching, from the logits the
engine hands inferd's logits processor (huggingface_batching.py), before that
processor samples. A token's log probability is the log-softmax of the model's raw
logits (before ``temperature`` and ``top_p``: the model's own distribution, as
vLLM gives by default); its alternatives are the ``k`` likeliest tokens there.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from inferd.generation import TokenLogprob, TopLogprob


@dataclass(frozen=True)
class TokenScores:
    """A generated token's log probability, and the ``k`` likeliest tokens' (ids)."""

    logprob: float
    top_ids: list[int]
    top_logprobs: list[float]


def scores_of(torch: ModuleType, logits: Any, tokens: Any, ks: list[int]) -> list[TokenScores]:
    """Each row's chosen token (``tokens``) scored, with its ``ks[row]`` alternatives:
    ``logits`` is ``[rows, vocabulary]``, raw."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(1, tokens.view(-1, 1)).squeeze(1).tolist()
    most = max(ks, default=0)
    top_values, top_ids = ([], []) if most == 0 else torch.topk(logprobs, most, dim=-1)
    scored = []
    for row, k in enumerate(ks):
        ids = top_ids[row, :k].tolist() if k else []
        values = top_values[row, :k].tolist() if k else []
        scored.append(TokenScores(float(chosen[row]), ids, values))
    return scored


def token_logprob(tokenizer: Any, token: int, scores: TokenScores) -> TokenLogprob:
    """The OpenAI side of ``scores``: each token as its text."""
    top = [
        TopLogprob(_text(tokenizer, i), value)
        for i, value in zip(scores.top_ids, scores.top_logprobs, strict=True)
    ]
    return TokenLogprob(_text(tokenizer, token), scores.logprob, top)


def _text(tokenizer: Any, token: int) -> str:
    text: str = tokenizer.decode([token])
    return text
