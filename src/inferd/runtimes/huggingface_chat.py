"""A chat's prompt for the Hugging Face runtime: the messages, and the tools, through
the model's chat template (huggingface_generation.py)."""

from __future__ import annotations

import json
from typing import Any

from inferd.errors import InvalidParameter, InvalidRequest
from inferd.generation import ChatMessage, GenerationRequest


def chat_prompt(name: str, tokenizer: Any, request: GenerationRequest) -> str:
    """The prompt text of ``request.messages`` (and ``request.tools``). A template that
    does not mention tools refuses them: the model would never see them."""
    template = getattr(tokenizer, "chat_template", None)
    if template is None:
        raise InvalidRequest(f"Model {name!r} has no chat template; use /v1/completions")
    refuse_unseen_tools(name, template, request)
    messages = [template_message(m) for m in request.messages or []]
    text: str = tokenizer.apply_chat_template(
        messages, tools=request.tools, tokenize=False, add_generation_prompt=True
    )
    return text


def refuse_unseen_tools(name: str, template: Any, request: GenerationRequest) -> None:
    """A 400 on ``tools`` when the chat template does not mention them (the vLLM runtime
    checks its template here too)."""
    if request.tools and "tools" not in str(template):
        raise InvalidParameter(
            f"Unsupported parameter: model {name!r}'s chat template does not take tools, "
            "so the model would never see them.",
            "tools",
            "unsupported_parameter",
        )


def template_message(message: ChatMessage) -> dict[str, Any]:
    """A message as chat templates take it: an assistant's tool calls with their
    arguments as objects (transformers' convention), a tool's answer with its call."""
    made: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        made["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call.arguments)},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        made["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        made["name"] = message.name
    return made


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:  # not JSON: the template gets the text as it came
        return text
