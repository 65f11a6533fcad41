"""The runtime side of the OpenAI-compatible endpoints (``/v1/completions``,
``/v1/chat/completions``, ``/v1/embeddings``): what a runtime implements to serve them.

Subclass :class:`GenerativeModel` (or :class:`AsyncGenerativeModel`, for an engine
with its own scheduler) and implement ``generate`` (text: both completion routes),
``embed`` (vectors), or both::

    class MyLlm(GenerativeModel):
        async def load(self) -> bool:
            self.engine = ...  # vLLM, llama.cpp bindings, your own loop
            return True

        def generate(self, request: GenerationRequest) -> Iterator[TextPiece]:
            for text in self.engine.stream(request.prompt or request.messages, ...):
                yield TextPiece(text)
            yield TextPiece("", finish_reason="stop", prompt_tokens=..., completion_tokens=...)

The server parses and checks the OpenAI body (server/openai/), runs one
:class:`GenerationRequest` per choice (``n`` choices of each prompt: ``n`` calls,
seeded ``seed + i``) and turns the pieces back into OpenAI's answers and stream
chunks. A request travels as any inference request does (queue, workers,
protocol processes, the model host): :func:`generation_request` packs it into an
:class:`~inferd.types.InferenceRequest`, and ``predict_stream`` / ``predict`` of
:class:`GenerativeModel` unpack it and call ``generate`` / ``embed``. A runtime
that already has its own ``predict`` and ``predict_stream`` (the Hugging Face one)
sends the calls :func:`is_generation_call` recognises to :meth:`answer_generation`
and :meth:`answer_embedding` itself.

``generate`` is a plain generator: each stream holds one of the model's slots
(``threads_per_worker``) for its life, and closing it (the client left) stops the
generation at the next piece. Its last piece says why it stopped (``stop``: an end
token or a stop string; ``length``: ``max_tokens``) and counts the tokens, as the
model's tokenizer does (usage); a stream that ends without saying counts as
``stop`` and one completion token per piece.

A runtime with LoRA adapters lists their names in ``openai_adapters`` (a tuple): each
answers ``/v1`` as a model of its own name, a request to it reaching ``generate``
with :attr:`GenerationRequest.adapter` set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar, Literal

import msgspec
import numpy as np

from inferd.errors import InvalidParameter, InvalidRequest
from inferd.model import Model
from inferd.types import InferenceRequest, InferenceResponse, Tensor

CALL = "inferd_openai"
"""The request parameter that marks a generation call: ``generate`` or ``embed``."""
BODY = "body"
EMBEDDING = "embedding"
COMPLETIONS, CHAT, EMBEDDINGS = "completions", "chat", "embeddings"
"""What a runtime serves (:attr:`GenerativeModel.openai_endpoints`)."""
FinishReason = Literal["stop", "length"]
LOGPROBS, TOOLS, RESPONSE_FORMAT, PRIORITY = "logprobs", "tools", "response_format", "priority"
"""The optional fields of :class:`GenerationRequest` a runtime honours only if it says
so (:attr:`GenerativeModel.generation_features`); else a request that uses one is a 400
naming it (:func:`refuse_unhonoured`)."""


class ToolCall(msgspec.Struct, frozen=True):
    """A function call the assistant made (OpenAI's ``tool_calls[i]``)."""

    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ChatMessage(msgspec.Struct, frozen=True):
    role: str  # system, user, assistant (developer and tool are passed on as they are)
    content: str  # text parts joined
    tool_calls: list[ToolCall] | None = None  # an assistant's calls
    tool_call_id: str | None = None  # a tool message: the call it answers
    name: str | None = None


class ResponseFormat(msgspec.Struct, frozen=True):
    """OpenAI's ``response_format``: ``json_object`` (any JSON object) or ``json_schema``
    (``schema``: a JSON Schema the answer must match)."""

    type: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool | None = None


class TopLogprob(msgspec.Struct, frozen=True, array_like=True):
    token: str  # the token's text
    logprob: float


class TokenLogprob(msgspec.Struct, frozen=True, array_like=True):
    """A generated token's log probability under the model (its raw logits' log-softmax,
    before temperature and top_p), and the likeliest tokens at its place."""

    token: str
    logprob: float
    top: list[TopLogprob] = []


class GenerationRequest(msgspec.Struct, kw_only=True):
    """One completion to generate: ``prompt`` (``/v1/completions``) or ``messages``
    (``/v1/chat/completions``, for the model's chat template)."""

    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    max_tokens: int | None = None  # None: the runtime's default (OpenAI: 16 for completions)
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = msgspec.field(default_factory=list)
    user: str | None = None
    # None: no log probabilities; k: each token's, with its k likeliest alternatives.
    logprobs: int | None = None
    # OpenAI's tool definitions ({"type": "function", "function": {"name",
    # "description", "parameters"}}), for the chat template; the server parses the
    # calls out of the text (server/openai/tool_calls.py).
    tools: list[dict[str, Any]] | None = None
    response_format: ResponseFormat | None = None  # None: free text
    # One of the model's LoRA adapters (its ``openai_adapters``), which /v1's ``model``
    # named; None: the model itself.
    adapter: str | None = None
    priority: int = 0  # lower runs first (vLLM's meaning); 0: the default

    @property
    def chat(self) -> bool:
        return self.messages is not None

    def asks_for(self) -> list[str]:
        """The optional features (LOGPROBS, TOOLS...) this request uses."""
        asked = [
            (LOGPROBS, self.logprobs is not None),
            (TOOLS, bool(self.tools)),
            (RESPONSE_FORMAT, self.response_format is not None),
            (PRIORITY, self.priority != 0),
        ]
        return [name for name, used in asked if used]


def refuse_unhonoured(request: GenerationRequest, honoured: frozenset[str], model: Model) -> None:
    """A 400 naming the first field of ``request`` that ``model`` does not honour
    (``honoured``: the features its runtime does): never silently ignored."""
    runtime = f"model {model.name!r} ({type(model).__name__})"
    for name in request.asks_for():
        if name in honoured:
            continue
        what = name
        if name == RESPONSE_FORMAT and request.response_format is not None:
            what = f"response_format {request.response_format.type}"
        raise InvalidParameter(
            f"Unsupported parameter: {what} is not supported by {runtime}.",
            name,
            "unsupported_parameter",
        )


class TextPiece(msgspec.Struct):
    """What ``generate`` yields: new text; its last piece also says why it ended and
    how many tokens the prompt and the completion took."""

    text: str
    finish_reason: FinishReason | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # The tokens this piece's text came from (asked by ``logprobs``), in order; a
    # piece may carry tokens whose text comes later (held back), the last one the rest.
    logprobs: list[TokenLogprob] | None = None


class EmbeddingRequest(msgspec.Struct, kw_only=True):
    texts: list[str]
    # None: the model's own width. A runtime may make vectors this wide itself; the
    # endpoint cuts wider ones to it and normalizes (server/openai/answers.py).
    dimensions: int | None = None
    user: str | None = None


class Embeddings(msgspec.Struct):
    """What ``embed`` returns: one row per text (float32 ``[len(texts), dims]``)."""

    vectors: np.ndarray
    prompt_tokens: int


_encoder = msgspec.msgpack.Encoder()
_generation_decoder = msgspec.msgpack.Decoder(GenerationRequest)
_embedding_decoder = msgspec.msgpack.Decoder(EmbeddingRequest)


def generation_request(call: GenerationRequest | EmbeddingRequest) -> InferenceRequest:
    """``call`` as an inference request: its one input is the call, packed (a 0-d
    BYTES tensor: never merged into a batch)."""
    body = np.empty((), dtype=object)
    body[()] = _encoder.encode(call)
    kind = "generate" if isinstance(call, GenerationRequest) else "embed"
    return InferenceRequest([Tensor(BODY, body)], parameters={CALL: kind})


def is_generation_call(request: InferenceRequest) -> bool:
    return request.parameters.get(CALL) in ("generate", "embed")


def _unpacked(request: InferenceRequest, kind: str, decoder: msgspec.msgpack.Decoder) -> object:
    if request.parameters.get(CALL) != kind or len(request.inputs) != 1:
        wanted = "completions" if kind == "generate" else "embeddings"
        raise InvalidRequest(
            f"This model answers the OpenAI-compatible {wanted} endpoint here, not an "
            "inference request: use /v1/completions, /v1/chat/completions or /v1/embeddings"
        )
    body = request.inputs[0].data
    try:
        return decoder.decode(body.item() if body.size == 1 else b"")
    except (msgspec.MsgspecError, TypeError) as error:  # not what generation_request packs
        raise InvalidRequest(f"Not a generation call: its body does not decode ({error})") from None


def read_generation(request: InferenceRequest) -> GenerationRequest:
    """The ``generate`` call :func:`generation_request` packed into ``request``
    (InvalidRequest if it is not one)."""
    call = _unpacked(request, "generate", _generation_decoder)
    assert isinstance(call, GenerationRequest)
    return call


_logprobs_decoder = msgspec.json.Decoder(list[TokenLogprob])


def piece_response(piece: TextPiece) -> InferenceResponse:
    """One piece as a streamed response (its fields as the response's parameters; its
    log probabilities as JSON text, a parameter every transport carries)."""
    parameters = {field: getattr(piece, field) for field in TextPiece.__struct_fields__}
    if piece.logprobs is not None:
        parameters[LOGPROBS] = msgspec.json.encode(piece.logprobs).decode()
    return InferenceResponse([], parameters={k: v for k, v in parameters.items() if v is not None})


def read_piece(response: InferenceResponse) -> TextPiece:
    parameters = response.parameters
    logprobs = parameters.get(LOGPROBS)
    return TextPiece(
        str(parameters.get("text", "")),
        parameters.get("finish_reason"),
        parameters.get("prompt_tokens"),
        parameters.get("completion_tokens"),
        None if logprobs is None else _logprobs_decoder.decode(logprobs),
    )


def embeddings_response(embeddings: Embeddings) -> InferenceResponse:
    vectors = np.ascontiguousarray(embeddings.vectors, dtype=np.float32)
    return InferenceResponse(
        [Tensor(EMBEDDING, vectors)], parameters={"prompt_tokens": embeddings.prompt_tokens}
    )


def read_embeddings(response: InferenceResponse) -> Embeddings:
    vectors = response.outputs[0].data if response.outputs else np.zeros((0, 0), np.float32)
    return Embeddings(vectors, int(response.parameters.get("prompt_tokens", 0)))


class GenerativeModel(Model):
    """A runtime for the OpenAI-compatible endpoints: implement ``generate``, ``embed``
    or both (see the module's doc)."""

    generation_features: ClassVar[frozenset[str]] = frozenset()
    """The optional fields of GenerationRequest it honours (LOGPROBS, TOOLS,
    RESPONSE_FORMAT, PRIORITY); a request using another is refused before ``generate``."""

    def generate(self, request: GenerationRequest) -> Iterator[TextPiece]:
        """The text of one completion, piece by piece, as the model makes it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement generate()")

    def embed(self, request: EmbeddingRequest) -> Embeddings:
        """One vector per text of ``request.texts``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement embed()")

    @property
    def openai_endpoints(self) -> tuple[str, ...]:
        """Which endpoints this model answers (``/v1/models`` lists it for them): by
        default, what it implements. Read once, after ``load``."""
        return _implemented(self, GenerativeModel)

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        return self.answer_embedding(request)

    def predict_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        return self.answer_generation(request)

    def answer_generation(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        """The responses of a ``generate`` call (the request :func:`generation_request` made)."""
        call = read_generation(request)
        refuse_unhonoured(call, self.generation_features, self)
        for piece in self.generate(call):
            yield piece_response(piece)

    def answer_embedding(self, request: InferenceRequest) -> InferenceResponse:
        """The answer of an ``embed`` call."""
        call = _unpacked(request, "embed", _embedding_decoder)
        assert isinstance(call, EmbeddingRequest)
        return embeddings_response(self.embed(call))


class AsyncGenerativeModel(Model):
    """As :class:`GenerativeModel`, for an engine that schedules many generations
    itself (vLLM's ``AsyncLLMEngine``, a server behind an async client): ``generate``
    is an async generator and ``embed`` a coroutine. Its streams run interleaved on
    the worker's event loop and hold no slot (up to ``max_concurrent_streams``), so
    the engine sees every request at once and can batch them; ``generate`` must
    never block the loop."""

    generation_features: ClassVar[frozenset[str]] = frozenset()  # as GenerativeModel's

    async def generate(self, request: GenerationRequest) -> AsyncIterator[TextPiece]:
        """The text of one completion, piece by piece, as the engine makes it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement generate()")
        yield TextPiece("")  # makes this an async generator, as overrides are

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        raise NotImplementedError(f"{type(self).__name__} does not implement embed()")

    @property
    def openai_endpoints(self) -> tuple[str, ...]:
        return _implemented(self, AsyncGenerativeModel)

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        call = _unpacked(request, "embed", _embedding_decoder)
        assert isinstance(call, EmbeddingRequest)
        return embeddings_response(await self.embed(call))

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        call = read_generation(request)
        refuse_unhonoured(call, self.generation_features, self)
        pieces = self.generate(call)
        try:
            async for piece in pieces:
                yield piece_response(piece)
        finally:  # closed early (the client left): the engine's generator stops now
            await pieces.aclose()  # type: ignore[attr-defined]


def _implemented(model: Model, base: type) -> tuple[str, ...]:
    """The endpoints whose methods ``model``'s class overrides from ``base``."""
    served: tuple[str, ...] = ()
    for method, endpoints in (("generate", (COMPLETIONS, CHAT)), ("embed", (EMBEDDINGS,))):
        if getattr(type(model), method) is not getattr(base, method):
            served += endpoints
    return served
