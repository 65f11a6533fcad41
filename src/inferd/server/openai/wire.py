"""OpenAI's request bodies, decoded with msgspec and checked into the runtime's calls
(inferd/generation.py).

The fields people use are read as OpenAI's API reference defines them (the chat's
own: chat_fields.py); fields this server cannot honour are refused with a 400 that
names them when they ask for something (``echo``, penalties...:
``unsupported_parameter``), and ignored at their defaults, so an SDK that sends them
as nulls still works. Fields a runtime may or may not honour (``logprobs``,
``tools``, ``response_format``, ``priority``) travel in the call, and the runtime
refuses those it does not (generation.py ``refuse_unhonoured``). Unknown fields are
ignored, as OpenAI's clients add new ones.

Every refusal is an InvalidParameter with OpenAI's ``param``, ``code`` and wording,
made here and nowhere else: a value out of its range (``in_range``:
``decimal_above_max_value``, ``integer_below_min_value``...), a list too long or
empty (``array_above_max_length``, ``empty_array``), an empty text to embed
(``empty_string``), a value not among those allowed (``invalid_value``). Counts
that size the work (``n``, prompts, texts, ``max_tokens``) are bounded here, so a
huge one is a 400 before anything is run.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec

from inferd.errors import InvalidParameter
from inferd.generation import EmbeddingRequest, GenerationRequest
from inferd.json_refusals import ShapeFault, not_json_reason, shape_fault
from inferd.server.openai import chat_fields
from inferd.server.openai.chat_fields import (
    MessageBody,
    ResponseFormatBody,
    ToolBody,
    unsupported,
)

MAX_STOP = 4  # as OpenAI
# Choices of one request, all prompts' together: each is a generation of its own
# (a context, a task, a slot in the queue), so a huge ``n`` is refused, not run.
MAX_CHOICES = 128
MAX_INPUTS = 2048  # texts of one embeddings request, as OpenAI
MAX_TOP_LOGPROBS = 20  # as OpenAI
MAX_LOGPROBS = 5  # of a completion's, as OpenAI
INT32_MAX = 2**31 - 1  # token counts and dimensions beyond it are no count at all
SEED_RANGE = (-(2**63), 2**63 - 1)  # what a 64-bit generator's seed holds
ENCODINGS = ("float", "base64")


class StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


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
    priority: int | None = None  # vLLM's extension: lower runs first


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
    response_format: ResponseFormatBody | None = None
    tools: list[ToolBody] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    top_logprobs: int | None = None
    functions: list[Any] | None = None  # OpenAI's deprecated form of tools: refused
    function_call: Any = None


class EmbeddingBody(msgspec.Struct, kw_only=True):
    """``POST /v1/embeddings``."""

    model: str
    input: str | list[Any]
    # Checked in embedding_call, to refuse in OpenAI's words; the enum is for the schema.
    encoding_format: Annotated[str, msgspec.Meta(extra_json_schema={"enum": ENCODINGS})] = "float"
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
        raise _invalid(shape_fault(error)) from None
    except RecursionError:
        raise InvalidParameter(
            "We could not parse the JSON body of your request: it is nested too deeply"
        ) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as error:  # see json_refusals.py
        raise InvalidParameter(
            f"We could not parse the JSON body of your request: {not_json_reason(body, error)}"
        ) from None
    return decoded


def _invalid(fault: ShapeFault) -> InvalidParameter:
    """A body of the wrong shape as OpenAI words it: the field as a dotted path
    (``messages.[0].role``) and its reason (``missing_required_parameter``,
    ``invalid_type``, ``invalid_value``)."""
    param = fault.field.removeprefix("$").lstrip(".").replace("[", ".[") or None
    if fault.missing is not None:
        return InvalidParameter(
            f"Missing required parameter: '{param}'.", param, "missing_required_parameter"
        )
    if param is None:  # the body itself: not an object
        return InvalidParameter(f"Invalid request: {fault.reason()}; send a JSON object")
    if fault.expected is not None:
        return InvalidParameter(
            f"Invalid type for '{param}': expected {fault.expected}, but got {fault.got} instead.",
            param,
            "invalid_type",
        )
    return InvalidParameter(f"Invalid value for '{param}': {fault.detail}", param, "invalid_value")


# The checks of one field's value, refused in OpenAI's words with OpenAI's ``code``
# (its API answers ``Invalid 'temperature': decimal above maximum value. Expected a
# value <= 2, but got 3 instead.`` with ``decimal_above_max_value``).


def _shown(value: float) -> str:
    """A number as OpenAI shows it: ``3``, not ``3.0``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)


def in_range(param: str, value: float | None, low: float, high: float, *, integer: bool) -> None:
    """``value`` (None: not sent) within ``low..high``, both included."""
    if value is None or low <= value <= high:
        return
    kind = "integer" if integer else "decimal"
    below = value < low
    side, bound = (
        ("below minimum", f">= {_shown(low)}") if below else ("above maximum", f"<= {_shown(high)}")
    )
    code = f"{kind}_{'below_min' if below else 'above_max'}_value"
    raise InvalidParameter(
        f"Invalid '{param}': {kind} {side} value. Expected a value {bound}, "
        f"but got {_shown(value)} instead.",
        param,
        code,
    )


def _not_empty(param: str, items: list[Any]) -> None:
    if not items:
        raise InvalidParameter(
            f"Invalid '{param}': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param,
            "empty_array",
        )


def _at_most(param: str, items: list[Any], most: int) -> None:
    if len(items) > most:
        raise InvalidParameter(
            f"Invalid '{param}': array too long. Expected an array with maximum length "
            f"{most}, but got an array with length {len(items)} instead.",
            param,
            "array_above_max_length",
        )


def _one_of(param: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        names = [f"'{name}'" for name in allowed]
        listed = (
            " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + ", and " + names[-1]
        )
        raise InvalidParameter(
            f"Invalid value: '{value}'. Supported values are: {listed}.", param, "invalid_value"
        )


_unsupported = unsupported


def stop_strings(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    found = [stop] if isinstance(stop, str) else stop
    _at_most("stop", found, MAX_STOP)
    return [text for text in found if text]


def _refuse_unsupported(body: _Sampling) -> None:
    if body.logit_bias:
        raise _unsupported("logit_bias")
    for name in ("presence_penalty", "frequency_penalty"):
        in_range(name, getattr(body, name), -2, 2, integer=False)
        if getattr(body, name) not in (None, 0, 0.0):
            raise _unsupported(name)


def _sampling(body: _Sampling, max_tokens: int | None) -> GenerationRequest:
    """The call of one choice (its prompt or messages set by the caller); ``max_tokens``
    is the body's limit (for a chat, max_completion_tokens when it is given)."""
    in_range(limit_name(body), max_tokens, 1, INT32_MAX, integer=True)
    in_range("n", body.n, 1, MAX_CHOICES, integer=True)
    in_range("temperature", body.temperature, 0, 2, integer=False)
    in_range("top_p", body.top_p, 0, 1, integer=False)
    in_range("seed", body.seed, *SEED_RANGE, integer=True)
    in_range("priority", body.priority, -INT32_MAX - 1, INT32_MAX, integer=True)
    _refuse_unsupported(body)
    return GenerationRequest(
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        seed=body.seed,
        stop=stop_strings(body.stop),
        user=body.user,
        priority=body.priority or 0,
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
    in_range("n", n, 1, MAX_CHOICES, integer=True)
    return n


def include_usage(body: _Sampling) -> bool:
    options = body.stream_options
    if options is not None and not body.stream:
        raise InvalidParameter(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            "invalid_value",
        )
    return bool(options is not None and options.include_usage)


def completion_calls(body: CompletionBody) -> list[GenerationRequest]:
    """One call per prompt (n choices of each are the caller's)."""
    if body.echo:
        raise _unsupported("echo")
    if body.suffix:
        raise _unsupported("suffix")
    if body.best_of not in (None, 1) and body.best_of != body.n:
        raise _unsupported("best_of")
    max_tokens = 16 if body.max_tokens is None else body.max_tokens  # OpenAI's default
    template = _sampling(body, max_tokens)
    template.logprobs = completion_logprobs(body.logprobs)
    prompts = _texts(body.prompt, "prompt")
    _at_most("prompt", prompts, MAX_CHOICES)
    n = choices(body)
    if len(prompts) * n > MAX_CHOICES:
        raise InvalidParameter(
            f"Invalid 'n': {n} choices of each of {len(prompts)} prompts make "
            f"{len(prompts) * n} completions; one request takes at most "
            f"{MAX_CHOICES}. Send fewer prompts or a smaller n.",
            "n",
            "invalid_value",
        )
    return [msgspec.structs.replace(template, prompt=p) for p in prompts]


def completion_logprobs(logprobs: Any) -> int | None:
    """A completion's ``logprobs``: how many alternatives of each token (0: only the
    token's own), None for none."""
    if logprobs is None:
        return None
    if isinstance(logprobs, bool) or not isinstance(logprobs, int):
        raise InvalidParameter(
            f"Invalid type for 'logprobs': expected an integer, but got {logprobs!r} instead.",
            "logprobs",
            "invalid_type",
        )
    in_range("logprobs", logprobs, 0, MAX_LOGPROBS, integer=True)
    return logprobs


def chat_call(body: ChatCompletionBody) -> GenerationRequest:
    _not_empty("messages", body.messages)
    for legacy in ("functions", "function_call"):
        if getattr(body, legacy) is not None:
            raise _unsupported(legacy)
    in_range("top_logprobs", body.top_logprobs, 0, MAX_TOP_LOGPROBS, integer=True)
    limit = (
        body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    )
    call = _sampling(body, limit)
    call.logprobs = chat_fields.chat_logprobs(body.logprobs, body.top_logprobs)
    call.tools = chat_fields.chat_tools(body.tools, body.tool_choice)
    call.response_format = chat_fields.response_format(body.response_format)
    call.messages = chat_fields.chat_messages(body.messages)
    return call


def embedding_call(body: EmbeddingBody) -> EmbeddingRequest:
    in_range("dimensions", body.dimensions, 1, INT32_MAX, integer=True)
    _one_of("encoding_format", body.encoding_format, ENCODINGS)
    texts = _texts(body.input, "input")
    _at_most("input", texts, MAX_INPUTS)
    for index, text in enumerate(texts):
        if not text:  # OpenAI's reference: the input "cannot be an empty string"
            param = "input" if isinstance(body.input, str) else f"input.[{index}]"
            raise InvalidParameter(
                f"Invalid '{param}': empty string. Expected a string with minimum length 1, "
                "but got an empty string instead.",
                param,
                "empty_string",
            )
    return EmbeddingRequest(texts=texts, dimensions=body.dimensions, user=body.user)


def _texts(value: str | list[Any], param: str) -> list[str]:
    """A string, or a non-empty list of strings (token arrays are not taken)."""
    texts = [value] if isinstance(value, str) else value
    _not_empty(param, texts)
    if not all(isinstance(text, str) for text in texts):
        raise InvalidParameter(
            f"Unsupported value: token arrays in '{param}' are not supported by this "
            "server; send a string or a list of strings.",
            param,
            "unsupported_value",
        )
    return texts


def model_of(body: CompletionBody | ChatCompletionBody | EmbeddingBody) -> str:
    if not body.model:
        raise InvalidParameter("model must name a model (GET /v1/models lists them)", "model")
    return body.model
