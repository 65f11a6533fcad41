"""OpenAI's answers: whole completions, stream chunks, embeddings, model lists, errors.

Shapes as OpenAI's API reference gives them: a completion is ``text_completion``
(``/v1/completions``) or ``chat.completion``; its stream sends ``text_completion``
/ ``chat.completion.chunk`` objects as server-sent events, every chunk of one
answer with the same ``id`` and ``created``, and ends with ``data: [DONE]``.
Errors are ``{"error": {"message", "type", "param", "code"}}``.

Log probabilities (``logprobs``): a chat choice's ``{"content": [{"token", "logprob",
"bytes", "top_logprobs"}]}``, a completion's ``{"tokens", "token_logprobs",
"top_logprobs" (a dict per token: the likeliest and the chosen one), "text_offset"
(from the prompt's end, as OpenAI counts with echo off: the prompt's length on)}``;
a stream's chunk holds those of the tokens whose text it carries. Tool calls
(tool_calls.py): a chat message's ``tool_calls`` with ``finish_reason``
``tool_calls``; a stream sends each call whole in one delta, after the content.
"""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from inferd.errors import ErrorCode, InferdError, InvalidParameter, Overloaded, PermissionDenied
from inferd.generation import TokenLogprob
from inferd.server.errors import CLIENT_DISCONNECTED, INTERNAL_ERROR, http_error
from inferd.server.openai.tool_calls import ParsedCall, ToolCallText

DONE = b"data: [DONE]\n\n"
OWNER = "inferd"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
}
_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    def to_dict(self) -> dict[str, int]:
        total = self.prompt_tokens + self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total,
        }


@dataclass(slots=True)
class Choice:
    """One choice's text as it is being generated."""

    index: int
    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    # The first choice of its prompt: the answer's usage counts each prompt once.
    counts_prompt: bool = True
    logprobs: list[TokenLogprob] | None = None  # asked for: the tokens' so far
    tools: ToolCallText | None = None  # its model may call tools: what a stream holds
    offset: int = 0  # a completion's text_offset of its first token: the prompt's length


class Completion:
    """One answer of either completion route: its identity, and how it is written."""

    def __init__(self, model: str, chat: bool, n: int = 1, *, single_call: bool = False) -> None:
        self.chat = chat
        self.single_call = single_call  # parallel_tool_calls false: one call at most
        self.n = n  # choices of each prompt
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model
        self.object = "chat.completion" if chat else "text_completion"
        self.chunk_object = "chat.completion.chunk" if chat else "text_completion"
        self.usage = Usage()  # of the choices that ended

    def choice(
        self, index: int, *, logprobs: bool = False, tools: bool = False, offset: int = 0
    ) -> Choice:
        return Choice(
            index,
            counts_prompt=index % self.n == 0,
            logprobs=[] if logprobs else None,
            tools=ToolCallText(self.single_call) if tools and self.chat else None,
            offset=offset,
        )

    def ended(self, choice: Choice) -> None:
        """Count a choice that ended in the answer's usage."""
        prompt = choice.usage.prompt_tokens if choice.counts_prompt else 0
        self.usage.add(Usage(prompt, choice.usage.completion_tokens))

    def whole(self, choices: list[Choice], usage: Usage) -> bytes:
        return orjson.dumps(
            self._head(self.object)
            | {
                "choices": [self._whole_choice(choice) for choice in choices],
                "usage": usage.to_dict(),
            }
        )

    def _whole_choice(self, choice: Choice) -> dict[str, Any]:
        text = "".join(choice.text)
        answer: dict[str, Any] = {"index": choice.index}
        finish_reason = choice.finish_reason or "stop"
        if self.chat:
            content, calls = choice.tools.parsed(text) if choice.tools else (text, [])
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = [call.to_dict() for call in calls]
                finish_reason = "tool_calls"
            answer["message"] = message
        else:
            answer["text"] = text
        answer["logprobs"] = self.logprobs(choice, choice.logprobs)
        answer["finish_reason"] = finish_reason
        return answer

    def logprobs(self, choice: Choice, tokens: list[TokenLogprob] | None) -> Any:
        """The ``logprobs`` of ``tokens`` of ``choice`` (None: not asked for)."""
        if tokens is None:
            return None
        if self.chat:
            return {"content": [_chat_token(token) for token in tokens], "refusal": None}
        offsets, offset = [], choice.offset
        for token in tokens:
            offsets.append(offset)
            offset += len(token.token)
        choice.offset = offset  # a stream's next chunk goes on from here
        return {
            "tokens": [token.token for token in tokens],
            "token_logprobs": [token.logprob for token in tokens],
            "top_logprobs": [_top_dict(token) for token in tokens],
            "text_offset": offsets,
        }

    def chunk(
        self,
        choice: Choice,
        text: str,
        finish_reason: str | None,
        *,
        first: bool,
        usage: bool,
        logprobs: list[TokenLogprob] | None = None,
        calls: list[ParsedCall] | None = None,
    ) -> bytes:
        """One event of a stream: new text of ``choice`` (a chat's first chunk says the
        role), its tool calls, or its end. ``usage``: the stream will end with the
        usage, so every chunk says ``"usage": null`` (as OpenAI's)."""
        index = choice.index
        answer: dict[str, Any] = {"index": index}
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if first else {}
            if text or (first and finish_reason is None and not calls):
                delta["content"] = text
            if calls:
                delta["tool_calls"] = [
                    {"index": i} | call.to_dict() for i, call in enumerate(calls)
                ]
            answer["delta"] = delta
        else:
            answer["text"] = text
        answer["logprobs"] = None if choice.logprobs is None else self.logprobs(choice, logprobs)
        answer["finish_reason"] = finish_reason
        data = self._head(self.chunk_object) | {"choices": [answer]}
        if usage:
            data["usage"] = None
        return b"data: " + orjson.dumps(data) + b"\n\n"

    def usage_chunk(self, usage: Usage) -> bytes:
        """The last chunk of a stream asked to include usage: no choices, the usage."""
        data = self._head(self.chunk_object) | {"choices": [], "usage": usage.to_dict()}
        return b"data: " + orjson.dumps(data) + b"\n\n"

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}


def _chat_token(token: TokenLogprob) -> dict[str, Any]:
    top = [
        {"token": t.token, "logprob": t.logprob, "bytes": list(t.token.encode())} for t in token.top
    ]
    return {
        "token": token.token,
        "logprob": token.logprob,
        "bytes": list(token.token.encode()),
        "top_logprobs": top,
    }


def _top_dict(token: TokenLogprob) -> dict[str, float]:
    """A completion token's likeliest alternatives, and itself (OpenAI: "up to
    logprobs+1 elements")."""
    top = {t.token: t.logprob for t in token.top}
    top.setdefault(token.token, token.logprob)
    return top


def shortened(model: str, vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The vectors cut to their first ``dimensions`` and scaled back to unit length
    (OpenAI's ``dimensions``: a shorter embedding of the same text), for any
    runtime; one that made them ``dimensions`` wide itself is only normalized."""
    if dimensions is None:
        return vectors
    width = vectors.shape[1]
    if dimensions > width:
        raise InvalidParameter(
            f"dimensions must be at most {width}, the width of model {model!r}'s "
            f"embeddings, got {dimensions}",
            "dimensions",
        )
    cut = vectors[:, :dimensions].astype(np.float32)
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return cut / np.maximum(norms, np.finfo(np.float32).tiny)  # a zero vector stays zero


def embeddings_answer(model: str, vectors: np.ndarray, prompt_tokens: int, encoding: str) -> bytes:
    """``/v1/embeddings``' answer; base64: each vector's float32 little-endian bytes."""
    rows = np.ascontiguousarray(vectors, dtype="<f4")
    data: list[dict[str, Any]] = []
    for index, row in enumerate(rows):
        value: Any = base64.b64encode(row.tobytes()).decode() if encoding == "base64" else row
        data.append({"object": "embedding", "index": index, "embedding": value})
    return orjson.dumps(
        {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )


def model_entry(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": OWNER}


def models_answer(entries: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"object": "list", "data": entries})


def openai_error(error: Exception, serving: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """The status, OpenAI-shaped body and headers that answer ``error`` (the queue's
    refusal is a 429 with its Retry-After; a refused key a 401)."""
    status, _, headers = http_error(error, serving)
    if isinstance(error, PermissionDenied):
        status = 401
    elif isinstance(error, Overloaded) or (
        isinstance(error, InferdError)
        and error.code is ErrorCode.UNAVAILABLE
        and error.retry_after is not None
    ):
        status = 429
    if isinstance(error, InferdError):
        message = error.message
    else:
        message = CLIENT_DISCONNECTED if status == 499 else INTERNAL_ERROR
    body = {
        "message": message,
        "type": _ERROR_TYPES.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        ),
        "param": error.param if isinstance(error, InvalidParameter) else None,
        "code": error.reason if isinstance(error, InvalidParameter) else _ERROR_CODES.get(status),
    }
    return status, orjson.dumps({"error": body}), headers


def error_event(error: Exception, serving: str) -> bytes:
    """An error after a stream started: one last event in the error's shape."""
    _, body, _ = openai_error(error, serving)
    return b"data: " + body + b"\n\n"
