"""Tool calls in a model's text, parsed into OpenAI's ``tool_calls``.

Two formats are read, the common ones of open models' chat templates:

- Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one
  block per call (a last block left open, as a model cut short leaves it, is read
  too); the text before the first block is the message's ``content``.
- A bare JSON object (Llama 3.1's JSON tool calling, Mistral-style lists): the
  whole text is ``{"name": ..., "arguments"|"parameters": {...}}`` or a list of them.

A text that holds no call in either format, or a block that is not such an object,
is plain content (never half-parsed). ``arguments`` are sent as JSON text, as
OpenAI sends them.

A stream (:class:`ToolCallText`) sends content as it comes, holding back what may
become a call: text from ``<tool_call>`` on (and an end that may be its start),
and the whole text when it starts as JSON. At the end the held text is parsed:
calls, or content after all.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

OPEN = "<tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def to_dict(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


def parse_tool_calls(text: str) -> tuple[str | None, list[ParsedCall]]:
    """The content and the calls of ``text``; no calls: ``(text, [])``."""
    start = text.find(OPEN)
    if start >= 0:
        calls = _calls([block.strip() for block in _BLOCK.findall(text[start:])])
        if calls:
            return text[:start].strip() or None, calls
        return text, []
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        calls = _calls([stripped])
        if calls:
            return None, calls
    return text, []


def _calls(documents: list[str]) -> list[ParsedCall]:
    """Each document's calls; [] if any of them is not a call."""
    found: list[ParsedCall] = []
    for document in documents:
        try:
            value = json.loads(document)
        except ValueError:
            return []
        for item in value if isinstance(value, list) else [value]:
            call = _call(item)
            if call is None:
                return []
            found.append(call)
    return found


def _call(item: Any) -> ParsedCall | None:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):  # already JSON text (some templates write it so)
        return ParsedCall(item["name"], arguments)
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(item["name"], json.dumps(arguments, ensure_ascii=False))


class ToolCallText:
    """One choice's text, when its model may call tools: streamed, what can be sent
    as content now, and at the end the calls (or the rest as content); ``single``
    (``parallel_tool_calls: false``): the first call only."""

    def __init__(self, single: bool = False) -> None:
        self.single = single
        self.held = ""  # text not sent: it may be (the start of) a call
        self.calling = False  # a call began (or the text began as JSON): hold the rest
        self.began = False  # some non-blank text came

    def add(self, text: str) -> str:
        """The content ``text`` makes ready to send ("" if none)."""
        held = self.held + text
        if self.calling:
            self.held = held
            return ""
        if not self.began:
            if not held.strip():
                self.held = held
                return ""
            self.began = True
            if held.lstrip()[:1] in ("{", "["):
                self.calling, self.held = True, held
                return ""
        start = held.find(OPEN)
        if start >= 0:
            self.calling, self.held = True, held[start:]
            return held[:start]
        keep = _open_prefix(held)
        self.held = held[len(held) - keep :] if keep else ""
        return held[: len(held) - keep]

    def parsed(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        """A whole text's content and calls."""
        content, calls = parse_tool_calls(text)
        return content, calls[:1] if self.single else calls

    def end(self) -> tuple[str, list[ParsedCall]]:
        """The content left to send, and the calls."""
        held, self.held = self.held, ""
        if self.calling:  # held: from <tool_call> on, or the whole text (JSON)
            _, calls = self.parsed(held)
            if calls:
                return "", calls
        return held, []


def _open_prefix(text: str) -> int:
    """How many characters at the end of ``text`` begin ``<tool_call>``."""
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if text.endswith(OPEN[:size]):
            return size
    return 0
