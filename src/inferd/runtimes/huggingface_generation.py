"""The Hugging Face runtime behind the OpenAI-compatible endpoints (inferd/generation.py).

A ``text-generation`` pipeline serves ``/v1/completions`` and, when its tokenizer has
a chat template, ``/v1/chat/completions``; a ``feature-extraction`` pipeline serves
``/v1/embeddings``. ``parameters.extra.openai: false`` turns them off.

Generation runs the model's own decoding loop here, one token per forward pass with
its key/value cache, so each token is yielded as soon as the model makes it and
closing the stream (the client left) stops it before the next forward pass:
greedy with ``temperature`` 0, otherwise sampling from the softmax of the logits
divided by ``temperature``, cut to the ``top_p`` nucleus, with a generator seeded
by ``seed`` (reproducible) or by the operating system. It ends at the tokenizer's
end token or a stop string (``stop``; the text before it is kept, as OpenAI
does) with ``finish_reason`` ``stop``, or after ``max_tokens`` (default: what the
context leaves) with ``length``. Text that could be the start of a stop string, or
an unfinished UTF-8 character, is held back until the next token settles it.
Tokens are counted by the model's tokenizer (usage). One sequence per call: no
batching across streams (each holds one of the model's slots while it runs).

Also honoured, in both paths (with continuous batching or without): ``logprobs``
(huggingface_scores.py) and ``tools``, given to the chat template
(``apply_chat_template(..., tools=...)``; a template that does not mention tools
refuses them: the model would never see them); an assistant's ``tool_calls`` reach
the template with their arguments as objects, as transformers' templates expect.
``response_format`` (no constrained decoding here) and ``priority`` (the engine
serves first come first served) are refused with a 400 naming them.

Embeddings: the mean of the last hidden states over each text's tokens (the
attention mask), float32, the model's full width (the OpenAI endpoint shortens them
to ``dimensions``: server/openai/answers.py ``shortened``).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from inferd.errors import InvalidParameter, InvalidRequest, ModelNotReady
from inferd.generation import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    LOGPROBS,
    TOOLS,
    EmbeddingRequest,
    Embeddings,
    FinishReason,
    GenerationRequest,
    GenerativeModel,
    TextPiece,
    TokenLogprob,
    refuse_unhonoured,
)
from inferd.runtimes.common import import_framework
from inferd.runtimes.huggingface_chat import chat_prompt
from inferd.runtimes.huggingface_scores import TokenScores, scores_of, token_logprob

if TYPE_CHECKING:
    from inferd.runtimes.huggingface_batching import ContinuousEngine

EXTRA = "huggingface"
GENERATION_TASK = "text-generation"
EMBEDDING_TASK = "feature-extraction"


class PipelineGeneration(GenerativeModel):
    """The OpenAI-compatible side of HuggingFaceModel (runtimes/huggingface.py), which
    sets ``_pipeline`` (and ``_engine``, with continuous batching) when it loads."""

    _pipeline: Any = None
    _engine: ContinuousEngine | None = None
    generation_features = frozenset({LOGPROBS, TOOLS})

    @property
    def openai_endpoints(self) -> tuple[str, ...]:
        return served_endpoints(self.settings.extra, self._pipeline)

    def generate(self, request: GenerationRequest) -> Iterator[TextPiece]:
        """One sequence in the runtime's own loop (continuous batching off)."""
        self._check_serves(COMPLETIONS)
        torch = import_framework("torch", type(self).__name__, EXTRA)
        return Generation(self.name, self._pipeline, torch).generate(request)

    async def generate_batched(
        self, request: GenerationRequest, engine: ContinuousEngine
    ) -> AsyncIterator[TextPiece]:
        """The sequence in the continuous batching engine, with the others."""
        self._check_serves(COMPLETIONS)
        refuse_unhonoured(request, self.generation_features, self)
        torch = import_framework("torch", type(self).__name__, EXTRA)
        pieces = Generation(self.name, self._pipeline, torch).generate_batched(request, engine)
        try:
            async for piece in pieces:
                yield piece
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]

    def embed(self, request: EmbeddingRequest) -> Embeddings:
        self._check_serves(EMBEDDINGS)
        torch = import_framework("torch", type(self).__name__, EXTRA)
        return mean_pooled(self.name, self._pipeline, torch, request)

    def _check_serves(self, endpoint: str) -> None:
        if self._pipeline is not None and endpoint not in self.openai_endpoints:
            task = self.settings.extra.get("task")
            raise InvalidRequest(f"Model {self.name!r} ({task}) does not serve {endpoint}")


def served_endpoints(extra: dict[str, Any], pipeline: Any) -> tuple[str, ...]:
    """What a pipeline of ``extra["task"]`` serves (``extra["openai"]`` false: nothing)."""
    if pipeline is None or extra.get("openai", True) is False:
        return ()
    task = extra.get("task")
    if task == GENERATION_TASK:
        chat = getattr(pipeline.tokenizer, "chat_template", None) is not None
        return (COMPLETIONS, CHAT) if chat else (COMPLETIONS,)
    if task == EMBEDDING_TASK:
        return (EMBEDDINGS,)
    return ()


def context_length(config: Any) -> int:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


class Generation:
    """One pipeline's model and tokenizer, generating for one request at a time."""

    def __init__(self, name: str, pipeline: Any, torch: ModuleType) -> None:
        if pipeline is None:
            raise ModelNotReady(f"Model {name!r} is not loaded")
        self.name = name
        self.model = pipeline.model
        self.tokenizer = pipeline.tokenizer
        self.torch = torch
        self.context = context_length(self.model.config)
        eos = self.tokenizer.eos_token_id
        self.ends = {eos} if isinstance(eos, int) else set()
        # The key/value cache's argument: ``cache`` since transformers 5, before it
        # ``past_key_values`` (deprecated in 5, and warned about on every call).
        forward = inspect.signature(self.model.forward).parameters
        self.cache_name = "cache" if "cache" in forward else "past_key_values"

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        tokenizer = self.tokenizer
        if request.messages is not None:
            text = chat_prompt(self.name, tokenizer, request)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer(request.prompt or "")["input_ids"]
        if not ids:
            raise InvalidRequest("The prompt is empty once tokenized; send some text")
        return list(ids)

    def limit(self, request: GenerationRequest, prompt_tokens: int) -> int:
        """How many tokens to generate at most: ``max_tokens``, or what the context
        leaves. As OpenAI: a ``max_tokens`` the context cannot hold whatever the
        prompt is ``invalid_value`` of ``max_tokens``; a prompt that leaves too little
        room is ``context_length_exceeded`` of ``messages`` (``prompt``)."""
        max_tokens, context = request.max_tokens, self.context
        if max_tokens is not None and max_tokens >= context:
            raise InvalidParameter(
                f"max_tokens is too large: {max_tokens}. Model {self.name!r} takes at most "
                f"{context} tokens, the prompt's and the completion's together",
                "max_tokens",
                "invalid_value",
            )
        room = context - prompt_tokens
        if room < 1 or (max_tokens is not None and max_tokens > room):
            asked = "" if max_tokens is None else f" and {max_tokens} in the completion"
            raise InvalidParameter(
                f"Model {self.name!r}'s maximum context length is {context} tokens; this "
                f"request has {prompt_tokens} in the prompt{asked}: shorten the prompt "
                "or lower max_tokens",
                "messages" if request.chat else "prompt",
                "context_length_exceeded",
            )
        return room if max_tokens is None else max_tokens

    def generate(self, request: GenerationRequest) -> Iterator[TextPiece]:
        """The completion from the runtime's own decoding loop, one sequence."""
        prompt = self.prompt_ids(request)
        text = CompletionText(self, request, len(prompt))
        for token, scores in self._tokens(prompt, request, text.limit):
            piece = text.add(token, scores)
            if piece:
                yield TextPiece(piece, logprobs=text.taken())
            if text.ended:
                break
        yield text.last()

    async def generate_batched(
        self, request: GenerationRequest, engine: ContinuousEngine
    ) -> AsyncIterator[TextPiece]:
        """The completion from the continuous batching engine, beside the others."""
        prompt = self.prompt_ids(request)
        text = CompletionText(self, request, len(prompt))
        tokens = engine.tokens(prompt, text.limit, request)
        try:
            async for token, scores in tokens:
                piece = text.add(token, scores)
                if piece:
                    yield TextPiece(piece, logprobs=text.taken())
                if text.ended:
                    break
        finally:  # a stop string or the client: the engine drops the sequence now
            await tokens.aclose()  # type: ignore[attr-defined]
        yield text.last()

    def _tokens(
        self, prompt: list[int], request: GenerationRequest, limit: int
    ) -> Iterator[tuple[int, TokenScores | None]]:
        """The model's next token (scored if ``logprobs`` asks), ``limit`` times at
        most (a forward pass each, on the key/value cache of the ones before)."""
        torch = self.torch
        device = self.model.device
        generator = torch.Generator(device=device)
        if request.seed is not None:
            generator.manual_seed(request.seed)
        else:
            generator.seed()
        ids = torch.tensor([prompt], device=device)
        past = None
        with torch.inference_mode():
            for _ in range(limit):
                out = self.model(input_ids=ids, use_cache=True, **{self.cache_name: past})
                past = getattr(out, self.cache_name)
                logits = out.logits[0, -1]
                token = self._pick(logits, request, generator)
                scores = None
                if request.logprobs is not None:
                    chosen = torch.tensor([token], device=device)
                    (scores,) = scores_of(torch, logits[None], chosen, [request.logprobs])
                yield token, scores
                ids = torch.tensor([[token]], device=device)

    def _pick(self, logits: Any, request: GenerationRequest, generator: Any) -> int:
        torch = self.torch
        if request.temperature == 0:
            return int(torch.argmax(logits))
        logits = logits.float() / request.temperature
        if request.top_p < 1:
            ordered, order = torch.sort(logits, descending=True)
            before = torch.cumsum(torch.softmax(ordered, dim=-1), dim=-1) - torch.softmax(
                ordered, dim=-1
            )
            ordered[before > request.top_p] = float("-inf")  # the first token always stays
            logits = torch.full_like(logits, float("-inf")).scatter(0, order, ordered)
        probabilities = torch.softmax(logits, dim=-1)
        return int(torch.multinomial(probabilities, 1, generator=generator))


class CompletionText:
    """The text of one completion as its tokens come: what is ready to send, when it
    ends (an end token, a stop string) and why; its last piece counts the tokens."""

    def __init__(self, generation: Generation, request: GenerationRequest, prompt: int) -> None:
        self.tokenizer = generation.tokenizer
        self.ends = generation.ends
        self.limit = generation.limit(request, prompt)
        self.prompt = prompt
        self.stops = StopStrings(request.stop)
        self.generated: list[int] = []
        self.sent = 0  # characters of the decoded text sent so far
        self.text = ""
        self.reason: FinishReason = "length"
        self.ended = False
        # Asked for: the log probabilities of tokens not yet sent with a piece.
        self.logprobs: list[TokenLogprob] | None = [] if request.logprobs is not None else None

    def add(self, token: int, scores: TokenScores | None = None) -> str:
        """The new text ``token`` makes ready to send ("" if none)."""
        if token in self.ends:  # not part of the text: not scored either
            self.reason, self.ended = "stop", True
            return ""
        self.generated.append(token)
        if self.logprobs is not None and scores is not None:
            self.logprobs.append(token_logprob(self.tokenizer, token, scores))
        text = self.text = self.tokenizer.decode(self.generated, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # a character split over tokens: wait for the rest
            return ""
        found = self.stops.find(text, self.sent)
        if found is not None:
            self.text, self.reason, self.ended = text[: max(found, self.sent)], "stop", True
            return ""
        ready = len(text) - self.stops.held_back(text)
        if ready <= self.sent:
            return ""
        piece, self.sent = text[self.sent : ready], ready
        return piece

    def taken(self) -> list[TokenLogprob] | None:
        """The log probabilities noted since the last piece (None: not asked for)."""
        if self.logprobs is None:
            return None
        taken, self.logprobs = self.logprobs, []
        return taken

    def last(self) -> TextPiece:
        """What is left of the text, why it ended, the token counts (and the rest of
        the log probabilities)."""
        rest = self.text[self.sent :]
        return TextPiece(rest, self.reason, self.prompt, len(self.generated), self.taken())


class StopStrings:
    """Where a stop string appears in the text, and how much of the text's end may
    still become one."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [stop for stop in stops if stop]
        self.longest = max((len(stop) for stop in self.stops), default=0)

    def find(self, text: str, sent: int) -> int | None:
        """The earliest stop string in ``text`` not wholly yielded (``sent``)."""
        start = max(0, sent - self.longest)
        found = [i for stop in self.stops if (i := text.find(stop, start)) >= 0]
        return min(found) if found else None

    def held_back(self, text: str) -> int:
        """How many characters at the end of ``text`` begin a stop string."""
        held = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(text)), held, -1):
                if text.endswith(stop[:size]):
                    held = size
                    break
        return held


def mean_pooled(
    name: str, pipeline: Any, torch: ModuleType, request: EmbeddingRequest
) -> Embeddings:
    """Each text's vector: the mean of its last hidden states over its tokens."""
    if pipeline is None:
        raise ModelNotReady(f"Model {name!r} is not loaded")
    model, tokenizer = pipeline.model, pipeline.tokenizer
    # Without a pad token rows cannot share a batch: one text at a time.
    groups = [request.texts] if tokenizer.pad_token is not None else [[t] for t in request.texts]
    vectors, tokens = [], 0
    limit = context_length(model.config)
    with torch.inference_mode():
        for texts in groups:
            encoded = tokenizer(
                texts, padding=True, truncation=True, max_length=limit, return_tensors="pt"
            ).to(model.device)
            hidden = model(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vectors.append((hidden * mask).sum(1) / mask.sum(1).clamp(min=1))
            tokens += int(encoded["attention_mask"].sum())
    return Embeddings(torch.cat(vectors).float().cpu().numpy(), tokens)
