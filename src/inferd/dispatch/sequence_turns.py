"""One request's turn in its sequence (:mod:`inferd.dispatch.sequence_dispatch`),
and a sequence's stream, which loses the sequence if its holder dies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from inferd.dispatch.sequences import Sequence
from inferd.errors import WorkerLost
from inferd.observability.trace_record import RequestTrace
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import Execution, ResponseStream


@dataclass(slots=True, eq=False)
class Turn:
    """A request of a sequence: waiting for the sequence to be free and a slot of its
    holder, then started (a predict's execution, or a stream's responses)."""

    sequence: Sequence
    request: InferenceRequest
    ends: bool  # it ends the sequence
    streams: bool  # a predict_stream call
    trace: RequestTrace | None = None  # a traced predict's: its batch is noted
    waiter: asyncio.Future[None] | None = None  # while it waits: done when started
    execution: Execution | None = None
    stream: ResponseStream | None = None

    def abandon(self, release: Callable[[], None]) -> None:
        """Its caller was cancelled as it started: stop it, free its slot when free."""
        if self.stream is not None:
            self.stream.cancel()  # its slot is freed when it has finished
        elif self.execution is not None:
            self.execution.when_free(release)


class SequenceStream:
    """A sequence's stream: as its responses, but a holder that died loses the sequence."""

    def __init__(self, responses: ResponseStream, lose: Callable[[], WorkerLost]) -> None:
        self._responses = responses
        self._lose = lose

    @property
    def finished(self) -> asyncio.Future[None]:
        return self._responses.finished

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> InferenceResponse:
        try:
            return await self._responses.__anext__()
        except WorkerLost:
            raise self._lose() from None

    async def take(self) -> list[InferenceResponse]:
        try:
            return await self._responses.take()
        except WorkerLost:
            raise self._lose() from None

    def cancel(self) -> None:
        self._responses.cancel()
