"""One OpenAI-compatible request's answer on the wire (endpoints.py): the ASGI sends
of a whole answer or a stream, and the chunks of one streamed choice."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.generation import TextPiece, TokenLogprob
from inferd.server.openai.answers import Choice, Completion, error_event, openai_error
from inferd.server.openai.tool_calls import ParsedCall
from inferd.server.rest.edge import RestEdge
from inferd.server.rest.fastpath import Receive, Scope, Send, send_whole
from inferd.server.rest.sse import EVENT_STREAM_TYPE

if TYPE_CHECKING:
    from inferd.context import RequestContext

EVENT_STREAM_HEADERS = (
    (b"content-type", EVENT_STREAM_TYPE.encode()),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx: pass each chunk on as it comes
)


class Call:
    """One request: its headers, body, and how to answer."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, serving: str) -> None:
        self.scope, self.receive, self.send, self.serving = scope, receive, send, serving
        self.headers: dict[bytes, bytes] = dict(scope["headers"])
        self.started = False

    async def start(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})

    async def chunk(self, body: bytes) -> None:
        await self.send({"type": "http.response.body", "body": body, "more_body": True})

    async def fail(self, error: Exception) -> None:
        if self.started:  # a stream: one last event says what went wrong
            await self.chunk(error_event(error, self.serving))
            await self.send({"type": "http.response.body", "body": b""})
            return
        status, body, headers = openai_error(error, self.serving)
        await send_whole(self.send, status, headers, body)


class ChoiceChunks:
    """The chunks of one choice of a stream: its text as it comes, then its end."""

    def __init__(
        self,
        call: Call,
        answer: Completion,
        choice: Choice,
        context: RequestContext,
        include_usage: bool,
    ) -> None:
        self.call, self.answer, self.choice = call, answer, choice
        self.context = context
        self.include_usage = include_usage
        self.first = True
        self.logprobs: list[TokenLogprob] = []  # of tokens whose text is not sent yet

    async def _start(self) -> None:
        if not self.call.started:  # the headers a runtime set go with the first chunk
            headers = RestEdge.response_headers(self.context, list(EVENT_STREAM_HEADERS))
            await self.call.start(headers)

    async def send_text(self, pieces: list[TextPiece]) -> None:
        chunks = []
        for piece in pieces:
            self.logprobs += piece.logprobs or []
            tools = self.choice.tools  # a model that may call tools: calls held back
            text = piece.text if tools is None else tools.add(piece.text)
            if text:
                chunks.append(self._chunk(text, None))
        if chunks:
            await self._start()
            await self.call.chunk(b"".join(chunks))

    async def end(self) -> None:
        await self._start()  # nothing generated: the answer starts here
        chunks, tools, reason = [], self.choice.tools, self.choice.finish_reason or "stop"
        if tools is not None:
            text, calls = tools.end()
            if text:
                chunks.append(self._chunk(text, None))
            if calls:
                chunks.append(self._chunk("", None, calls))
                reason = self.choice.finish_reason = "tool_calls"
        chunks.append(self._chunk("", reason))
        await self.call.chunk(b"".join(chunks))

    def _chunk(
        self, text: str, finish_reason: str | None, calls: list[ParsedCall] | None = None
    ) -> bytes:
        first, self.first = self.first, False
        logprobs, self.logprobs = self.logprobs, []
        return self.answer.chunk(
            self.choice,
            text,
            finish_reason,
            first=first,
            usage=self.include_usage,
            logprobs=logprobs,
            calls=calls,
        )
