"""One request's turn in its sequence (:mod:`inferd.dispatch.sequence_dispatch`),
and what its caller holds once it is taken on: a predict's run, a stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
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


class TurnRun:
    """A predict of a sequence taken on (a dispatch policy's Started): waits for its
    turn if it has to, runs, then frees the sequence; a holder that died loses it."""

    __slots__ = ("_lose", "_release", "_turn", "_wait", "dispatched_ns")

    def __init__(
        self,
        turn: Turn,
        wait: Awaitable[None] | None,
        release: Callable[[], None],
        lose: Callable[[], WorkerLost],
    ) -> None:
        self._turn = turn
        self._wait = wait
        self._release = release
        self._lose = lose
        self.dispatched_ns = 0

    async def result(self) -> InferenceResponse:
        if self._wait is not None:
            await self._wait
            self.dispatched_ns = time.perf_counter_ns()
        execution = self._turn.execution
        assert execution is not None  # a predict's turn starts with its execution
        try:
            response = await execution.result()
        except asyncio.CancelledError:
            execution.when_free(self._release)
            raise
        except WorkerLost:
            lost = self._lose()
            self._release()
            raise lost from None
        except BaseException:
            self._release()
            raise
        self._release()
        return response


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
