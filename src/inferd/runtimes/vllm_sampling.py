"""OpenAI requests as vLLM's ``SamplingParams`` keywords, and vLLM's log probabilities
as inferd's: the vLLM runtime's pure mapping (runtimes/vllm.py), without vLLM."""

from __future__ import annotations

from typing import Any

from inferd.generation import GenerationRequest, ResponseFormat, TokenLogprob, TopLogprob

FINISH_REASONS = {"stop": "stop", "length": "length"}
STRUCTURED = "structured_outputs"  # SamplingParams' field: StructuredOutputsParams


def sampling_arguments(request: GenerationRequest) -> dict[str, Any]:
    """vLLM ``SamplingParams`` keywords for one OpenAI choice: the one place a field of
    :class:`GenerationRequest` reaches the engine (``tools`` reach the chat template,
    ``priority`` ``AsyncLLM.generate``). ``structured_outputs`` is the keywords of
    vLLM's ``StructuredOutputsParams``, made in ``pieces``."""
    arguments: dict[str, Any] = {
        "n": 1,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "seed": request.seed,
    }
    if request.stop:
        arguments["stop"] = list(request.stop)
    if request.logprobs is not None:  # k alternatives; 0: the chosen token's alone
        arguments["logprobs"] = request.logprobs
    if request.response_format is not None:
        arguments[STRUCTURED] = structured_outputs(request.response_format)
    return arguments


def structured_outputs(form: ResponseFormat) -> dict[str, Any]:
    """``response_format`` as vLLM's ``StructuredOutputsParams`` keywords: a schema
    the output must match, or any JSON object."""
    if form.type == "json_schema" and form.schema is not None:
        return {"json": form.schema}
    return {"json_object": True}


def token_logprobs(token_ids: Any, positions: Any, k: int) -> list[TokenLogprob]:
    """vLLM's log probabilities of a delta's new tokens as inferd's: each position a
    dict (token id -> ``Logprob``) of the chosen token and the ``k`` likeliest, each
    with its vocabulary rank (from 1); the alternatives are those ranked ``k`` or better,
    in order, the chosen one among them if it is."""
    made = []
    for token, position in zip(token_ids, positions or (), strict=False):
        chosen = position[token]
        ranked = [e for e in position.values() if e.rank is not None and e.rank <= k]
        top = [TopLogprob(e.decoded_token or "", e.logprob) for e in sorted(ranked, key=_rank)]
        made.append(TokenLogprob(chosen.decoded_token or "", chosen.logprob, top))
    return made


def _rank(entry: Any) -> int:
    rank: int = entry.rank
    return rank
