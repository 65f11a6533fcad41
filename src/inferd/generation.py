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
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Literal

import msgspec
import numpy as np

from inferd.errors import InvalidRequest
from inferd.model import Model
from inferd.types import InferenceRequest, InferenceResponse, Tensor

CALL = "inferd_openai"
"""The request parameter that marks a generation call: ``generate`` or ``embed``."""
BODY = "body"
EMBEDDING = "embedding"
COMPLETIONS, CHAT, EMBEDDINGS = "completions", "chat", "embeddings"
"""What a runtime serves (:attr:`GenerativeModel.openai_endpoints`)."""
FinishReason = Literal["stop", "length"]


class ChatMessage(msgspec.Struct, frozen=True):
    role: str  # system, user, assistant (developer and tool are passed on as they are)
    content: str  # text parts joined


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

    @property
    def chat(self) -> bool:
        return self.messages is not None


class TextPiece(msgspec.Struct):
    """What ``generate`` yields: new text; its last piece also says why it ended and
    how many tokens the prompt and the completion took."""

    text: str
    finish_reason: FinishReason | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


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


def piece_response(piece: TextPiece) -> InferenceResponse:
    """One piece as a streamed response (its fields as the response's parameters)."""
    parameters = {field: getattr(piece, field) for field in TextPiece.__struct_fields__}
    return InferenceResponse([], parameters={k: v for k, v in parameters.items() if v is not None})


def read_piece(response: InferenceResponse) -> TextPiece:
    parameters = response.parameters
    return TextPiece(
        str(parameters.get("text", "")),
        parameters.get("finish_reason"),
        parameters.get("prompt_tokens"),
        parameters.get("completion_tokens"),
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
        for piece in self.generate(read_generation(request)):
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
        pieces = self.generate(read_generation(request))
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
