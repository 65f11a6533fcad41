"""Server-Sent Events as every benchmark client reads them: one parser for all.

An event is a block of lines ended by a blank line (``\\n\\n``); ``event: NAME`` names
it (``message`` when absent), each ``data:`` line adds to its data (one space after
the colon dropped, lines joined with ``\\n``), lines starting with ``:`` are comments.
A block with no data is no event (a keep-alive). What the event must be (only data
events, a JSON chunk, ``[DONE]``) is each client's own check, not the parser's.

:func:`sse_events` reads a whole body; :class:`SseSplitter` takes a body piece by
piece, as it arrives, and gives each event once its blank line is in.
"""

from __future__ import annotations

from typing import NamedTuple

EVENT_END = b"\n\n"
DATA = b"data:"
EVENT = b"event:"
MESSAGE = "message"


class SseEvent(NamedTuple):
    kind: str  # the ``event:`` field, "message" when absent
    data: bytes


def parse_event(block: bytes) -> SseEvent | None:
    """The event of one block (without its blank line); None when it holds no data."""
    if block.startswith(b"data: ") and b"\n" not in block:
        return SseEvent(MESSAGE, block[6:])  # the usual event, read without a loop
    kind, data = MESSAGE, []
    for line in block.split(b"\n"):
        field, value = _field(line.rstrip(b"\r"))
        if field == EVENT:
            kind = value.decode()
        elif field == DATA:
            data.append(value)
    return SseEvent(kind, b"\n".join(data)) if data else None


def _field(line: bytes) -> tuple[bytes, bytes]:
    for name in (DATA, EVENT):
        if line.startswith(name):
            value = line[len(name) :]
            return name, value[1:] if value.startswith(b" ") else value
    return b"", line  # a comment, or a field no client here reads (id:, retry:)


def sse_events(body: bytes) -> list[SseEvent]:
    """Every event of a whole body (a last block without its blank line included)."""
    events = (parse_event(block) for block in body.split(EVENT_END))
    return [event for event in events if event is not None]


class SseSplitter:
    """Events out of a body that arrives in pieces; ``rest`` is what is not yet an event."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, data: bytes) -> list[SseEvent]:
        self.rest += data
        if EVENT_END not in self.rest:
            return []
        *blocks, self.rest = self.rest.split(EVENT_END)
        events = (parse_event(block) for block in blocks)
        return [event for event in events if event is not None]
