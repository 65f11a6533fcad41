"""The chat body's fields beyond sampling, read into the runtime's call
(inferd/generation.py): messages (with an assistant's ``tool_calls`` and ``tool``
results), ``tools`` and ``tool_choice``, ``response_format``, ``logprobs`` and
``top_logprobs``. What cannot be honoured is a 400 naming the field (wire.py's
conventions: OpenAI's ``param`` and ``code``).

``tool_choice``: ``auto`` (the default with tools) lets the model call them, and the
server parses the calls out of its text (tool_calls.py); ``none`` sends no tools
to the model and parses nothing. ``required`` or a named function would need
decoding constrained to a call, which no runtime here does: a 400.
"""

from __future__ import annotations

from typing import Any

import msgspec

from inferd.errors import InvalidParameter
from inferd.generation import ChatMessage, ResponseFormat, ToolCall


class TextPart(msgspec.Struct):
    type: str
    text: str | None = None


class FunctionCallBody(msgspec.Struct):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCallBody(msgspec.Struct):
    id: str
    function: FunctionCallBody
    type: str = "function"


class MessageBody(msgspec.Struct):
    role: str
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallBody] | None = None  # an assistant's
    tool_call_id: str | None = None  # a tool's answer: the call it answers


class FunctionBody(msgspec.Struct):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolBody(msgspec.Struct):
    type: str
    function: FunctionBody | None = None


class JsonSchemaBody(msgspec.Struct):
    name: str
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class ResponseFormatBody(msgspec.Struct):
    type: str
    json_schema: JsonSchemaBody | None = None


FORMATS = ("text", "json_object", "json_schema")
CHOICES = ("none", "auto")  # of tool_choice's strings, what is honoured


def unsupported(param: str) -> InvalidParameter:
    """A field this server cannot honour, sent with a value that asks for something."""
    return InvalidParameter(
        f"Unsupported parameter: '{param}' is not supported by this server.",
        param,
        "unsupported_parameter",
    )


def unsupported_value(param: str, detail: str) -> InvalidParameter:
    return InvalidParameter(f"Unsupported value: {detail}", param, "unsupported_value")


def chat_messages(messages: list[MessageBody]) -> list[ChatMessage]:
    return [_message(message, index) for index, message in enumerate(messages)]


def _message(message: MessageBody, index: int) -> ChatMessage:
    content = message.content
    if isinstance(content, list):
        texts = []
        for part in content:
            if part.type != "text" or part.text is None:
                raise unsupported_value(
                    f"messages.[{index}].content",
                    f"messages[{index}]: content parts of type {part.type!r} are not "
                    "supported by this server; send text parts.",
                )
            texts.append(part.text)
        content = "".join(texts)
    calls = None
    if message.tool_calls:
        calls = [ToolCall(c.id, c.function.name, c.function.arguments) for c in message.tool_calls]
    return ChatMessage(
        message.role,
        content or "",
        tool_calls=calls,
        tool_call_id=message.tool_call_id,
        name=message.name,
    )


def chat_tools(tools: list[ToolBody] | None, choice: str | dict[str, Any] | None) -> Any:
    """The tool definitions for the model (None: none, or ``tool_choice`` ``none``)."""
    if isinstance(choice, dict) or (choice is not None and choice not in CHOICES):
        shown = choice if isinstance(choice, str) else "a named function"
        raise unsupported_value(
            "tool_choice",
            f"'tool_choice' {shown!r} is not supported by this server: it would need "
            "decoding constrained to a call; send 'auto' or 'none'.",
        )
    if not tools or choice == "none":
        return None
    definitions = []
    for index, tool in enumerate(tools):
        if tool.type != "function" or tool.function is None:
            raise unsupported_value(
                f"tools.[{index}].type",
                f"tools[{index}]: tools of type {tool.type!r} are not supported by this "
                "server; send function tools.",
            )
        function = msgspec.structs.asdict(tool.function)
        definitions.append(
            {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}
        )
    return definitions


def response_format(body: ResponseFormatBody | None) -> ResponseFormat | None:
    """The format asked (None: free text)."""
    if body is None or body.type == "text":
        return None
    if body.type not in FORMATS:
        raise InvalidParameter(
            f"Invalid value: '{body.type}'. Supported values are: 'text', 'json_object', "
            "and 'json_schema'.",
            "response_format.type",
            "invalid_value",
        )
    if body.type == "json_object":
        return ResponseFormat("json_object")
    if body.json_schema is None:
        raise InvalidParameter(
            "Missing required parameter: 'response_format.json_schema'.",
            "response_format.json_schema",
            "missing_required_parameter",
        )
    schema = body.json_schema
    return ResponseFormat("json_schema", schema.schema, schema.name, schema.strict)


def chat_logprobs(logprobs: Any, top_logprobs: int | None) -> int | None:
    """How many alternatives to give of each token (None: no log probabilities);
    ``top_logprobs`` (already in range) needs ``logprobs`` true, as OpenAI says."""
    if logprobs not in (None, True, False):
        raise InvalidParameter(
            f"Invalid type for 'logprobs': expected a boolean, but got {logprobs!r} instead.",
            "logprobs",
            "invalid_type",
        )
    if not logprobs:
        if top_logprobs:
            raise InvalidParameter(
                "Invalid value for 'top_logprobs': 'logprobs' must be set to true when "
                "'top_logprobs' is used.",
                "top_logprobs",
                "invalid_value",
            )
        return None
    return top_logprobs or 0
