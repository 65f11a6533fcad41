"""OpenAI's request bodies, decoded with msgspec and checked into the runtime's calls
(inferd/generation.py).

The fields people use are read as OpenAI's API reference defines them; fields a
runtime here cannot honour are refused with a 400 that names them when they ask
for something (``logprobs``, ``echo``, ``tools``...), and ignored at their
defaults, so an SDK that sends them as nulls still works. Unknown fields are
ignored, as OpenAI's clients add new ones.
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar

import msgspec

from inferd.errors import InvalidParameter
from inferd.generation import ChatMessage, EmbeddingRequest, GenerationRequest

MAX_STOP = 4  # as OpenAI
MAX_CHOICES = 128


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class TextPart(msgspec.Struct):
    type: str
    text: str | None = None


class MessageBody(msgspec.Struct):
    role: str
    content: str | list[TextPart] | None = None
    name: str | None = None


class _Sampling(msgspec.Struct, kw_only=True):
    """What both completion bodies share."""

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    logprobs: Any = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None


class CompletionBody(_Sampling, kw_only=True):
    """``POST /v1/completions``."""

    prompt: str | list[Any]
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None


class ChatCompletionBody(_Sampling, kw_only=True):
    """``POST /v1/chat/completions``."""

    messages: list[MessageBody]
    max_completion_tokens: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    top_logprobs: int | None = None


class EmbeddingBody(msgspec.Struct, kw_only=True):
    """``POST /v1/embeddings``."""

    model: str
    input: str | list[Any]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


_decoders: dict[type, msgspec.json.Decoder[Any]] = {
    body: msgspec.json.Decoder(body) for body in (CompletionBody, ChatCompletionBody, EmbeddingBody)
}


Body = TypeVar("Body", CompletionBody, ChatCompletionBody, EmbeddingBody)


def decode(body: bytes, kind: type[Body]) -> Body:
    """The body as ``kind``; InvalidParameter naming the field that is wrong."""
    if not body.strip():
        raise InvalidParameter("The request body is empty; send a JSON object")
    try:
        decoded: Body = _decoders[kind].decode(body)
    except msgspec.ValidationError as error:
        raise _invalid(str(error)) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        raise InvalidParameter(f"The request body is not valid JSON: {error}") from None
    return decoded


_MISSING = re.compile(r"^Object missing required field `([^`]+)`")


def _invalid(text: str) -> InvalidParameter:
    """msgspec's complaint as OpenAI words it: the field as a dotted path
    (``messages.[0].role``) and its reason (``missing_required_parameter``,
    ``invalid_type``, ``invalid_value``)."""
    where, _, path = text.partition(" - at `$")
    param = path.rstrip("`").lstrip(".").replace("[", ".[") or None
    missing = _MISSING.match(where)
    if missing:
        param = f"{param}.{missing[1]}" if param else missing[1]
        return InvalidParameter(
            f"Missing required parameter: '{param}'.", param, "missing_required_parameter"
        )
    if param is None:  # the body itself: not an object
        return InvalidParameter(f"Invalid request: {text}; send a JSON object")
    if where.startswith("Expected `"):
        return InvalidParameter(f"Invalid type for '{param}': {where}", param, "invalid_type")
    return InvalidParameter(f"Invalid value for '{param}': {where}", param, "invalid_value")


def stop_strings(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    found = [stop] if isinstance(stop, str) else stop
    if len(found) > MAX_STOP:
        raise InvalidParameter(f"stop takes up to {MAX_STOP} strings, got {len(found)}", "stop")
    return [text for text in found if text]


def _refuse_unsupported(body: _Sampling) -> None:
    if body.logprobs not in (None, False, 0):
        raise InvalidParameter("logprobs are not supported by this server", "logprobs")
    if body.logit_bias:
        raise InvalidParameter("logit_bias is not supported by this server", "logit_bias")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(body, name) not in (None, 0, 0.0):
            raise InvalidParameter(f"{name} is not supported by this server", name)


def _sampling(body: _Sampling, max_tokens: int | None) -> GenerationRequest:
    """The call of one choice (its prompt or messages set by the caller); ``max_tokens``
    is the body's limit (for a chat, max_completion_tokens when it is given)."""
    _refuse_unsupported(body)
    temperature = 1.0 if body.temperature is None else body.temperature
    if not 0 <= temperature <= 2:
        raise InvalidParameter(
            f"temperature must be between 0 and 2, got {temperature}", "temperature"
        )
    top_p = 1.0 if body.top_p is None else body.top_p
    if not 0 < top_p <= 1:
        raise InvalidParameter(f"top_p must be greater than 0 and at most 1, got {top_p}", "top_p")
    if max_tokens is not None and max_tokens < 1:
        name = limit_name(body)
        raise InvalidParameter(f"{name} must be at least 1, got {max_tokens}", name)
    return GenerationRequest(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=body.seed,
        stop=stop_strings(body.stop),
        user=body.user,
    )


def limit_name(body: _Sampling) -> str:
    """The field that set the completion's token limit, as the client sent it."""
    chat = isinstance(body, ChatCompletionBody) and body.max_completion_tokens is not None
    return "max_completion_tokens" if chat else "max_tokens"


def as_sent(error: InvalidParameter, body: _Sampling) -> InvalidParameter:
    """``error`` (a runtime's, which knows the limit as ``max_tokens``) naming the
    field the client sent."""
    name = limit_name(body)
    if error.param == "max_tokens" and name != "max_tokens":
        renamed = error.message.replace("max_tokens", name)
        return InvalidParameter(renamed, name, error.reason)
    return error


def choices(body: _Sampling) -> int:
    n = 1 if body.n is None else body.n
    if not 1 <= n <= MAX_CHOICES:
        raise InvalidParameter(f"n must be between 1 and {MAX_CHOICES}, got {n}", "n")
    return n


def include_usage(body: _Sampling) -> bool:
    options = body.stream_options
    if options is not None and not body.stream:
        raise InvalidParameter("stream_options is only allowed with stream: true", "stream_options")
    return bool(options is not None and options.include_usage)


def completion_calls(body: CompletionBody) -> list[GenerationRequest]:
    """One call per prompt (n choices of each are the caller's)."""
    if body.echo:
        raise InvalidParameter("echo is not supported by this server", "echo")
    if body.suffix:
        raise InvalidParameter("suffix is not supported by this server", "suffix")
    if body.best_of not in (None, 1) and body.best_of != body.n:
        raise InvalidParameter("best_of is not supported by this server", "best_of")
    max_tokens = 16 if body.max_tokens is None else body.max_tokens  # OpenAI's default
    template = _sampling(body, max_tokens)
    return [msgspec.structs.replace(template, prompt=p) for p in _texts(body.prompt, "prompt")]


def chat_call(body: ChatCompletionBody) -> GenerationRequest:
    if body.tools:
        raise InvalidParameter("tools are not supported by this server", "tools")
    kind = (body.response_format or {}).get("type", "text")
    if kind != "text":
        raise InvalidParameter(
            f"response_format {kind!r} is not supported by this server", "response_format"
        )
    if not body.messages:
        raise InvalidParameter("messages must hold at least one message", "messages")
    limit = (
        body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    )
    call = _sampling(body, limit)
    call.messages = [_message(message, i) for i, message in enumerate(body.messages)]
    return call


def _message(message: MessageBody, index: int) -> ChatMessage:
    content = message.content
    if isinstance(content, list):
        texts = []
        for part in content:
            if part.type != "text" or part.text is None:
                raise InvalidParameter(
                    f"messages[{index}]: content parts of type {part.type!r} are not "
                    "supported; send text parts",
                    f"messages.[{index}].content",
                )
            texts.append(part.text)
        content = "".join(texts)
    return ChatMessage(message.role, content or "")


def embedding_call(body: EmbeddingBody) -> EmbeddingRequest:
    if body.dimensions is not None and body.dimensions < 1:
        raise InvalidParameter(
            f"dimensions must be at least 1, got {body.dimensions}", "dimensions"
        )
    return EmbeddingRequest(
        texts=_texts(body.input, "input"), dimensions=body.dimensions, user=body.user
    )


def _texts(value: str | list[Any], param: str) -> list[str]:
    """A string, or a non-empty list of strings (token arrays are not taken)."""
    texts = [value] if isinstance(value, str) else value
    if not texts:
        raise InvalidParameter(f"{param} must not be empty", param)
    if not all(isinstance(text, str) for text in texts):
        raise InvalidParameter(
            f"{param} must be a string or a list of strings; token arrays are not supported",
            param,
        )
    return texts


def model_of(body: CompletionBody | ChatCompletionBody | EmbeddingBody) -> str:
    if not body.model:
        raise InvalidParameter("model must name a model (GET /v1/models lists them)", "model")
    return body.model
