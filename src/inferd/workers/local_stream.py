"""An async generator's ``predict_stream`` run on this process's loop, read ahead of
whoever reads it.

Used by the in-process pool (the reader is the request's handler) and by a
worker process (the reader is the task that ships responses to the main
process). A task of the stream's own steps the generator when the reader waits,
and ahead of it up to ``read_ahead`` responses the reader has not taken yet
(``READ_AHEAD``; in a worker, what its credit covers: :meth:`LocalStream.allow_ahead`).
The reader takes every ready one at once (:meth:`LocalStream.take`), so a model
that yields faster than they are sent has them sent together (one write for
several events) while each is still sent as soon as the reader is free. The bound
is the back-pressure: a reader that does not read pauses the generator.

Its steps run on the event loop: an async generator awaits rather than blocks.
A plain generator never runs here (it would hold the loop between yields): in
process it runs in a thread of the model's own (:mod:`inferd.workers.thread_stream`),
in a worker process likewise (:mod:`inferd.workers.worker_streams`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator

from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers.base import StreamBase
from inferd.workers.loaded_model import LoadedModel

logger = logging.getLogger(__name__)

# Responses a stream may make before its reader takes them: enough to batch a fast
# model's writes, few enough that a stream holds little memory.
READ_AHEAD = 16


class LocalStream(StreamBase):
    """One ``predict_stream`` call as a :class:`~inferd.workers.base.ResponseStream`."""

    def __init__(
        self,
        loaded: LoadedModel,
        request: InferenceRequest,
        read_ahead: int = READ_AHEAD,
    ) -> None:
        super().__init__()
        self._loaded = loaded
        self._read_ahead = max(read_ahead, 0)
        responses = loaded.open_stream(request)
        if not isinstance(responses, AsyncIterator):  # the pools send plain ones elsewhere
            raise TypeError("LocalStream steps async generators only")
        self._responses = responses
        self._ready: deque[InferenceResponse] = deque()
        self._end: BaseException | None = None  # StopAsyncIteration, or the model's error
        self._reader: asyncio.Future[None] | None = None  # the reader waits for a response
        self._room: asyncio.Future[None] | None = None  # the stepper waits for the reader
        self._cancelled = False
        self._stepper = asyncio.ensure_future(self._step_ahead())

    async def __anext__(self) -> InferenceResponse:
        await self._wait_for_response()
        response = self._ready.popleft()
        _wake(self._room)
        return response

    async def take(self) -> list[InferenceResponse]:
        await self._wait_for_response()
        ready = list(self._ready)
        self._ready.clear()
        _wake(self._room)
        return ready

    def allow_ahead(self, count: int) -> None:
        """Let the generator run up to ``count`` responses ahead of the reader from now
        (a worker allows what its credit covers)."""
        self._read_ahead = max(count, 0)
        _wake(self._room)

    def cancel(self) -> None:
        """Stop the generator (its ``finally`` runs) and drop what it made."""
        self._ready.clear()
        if not self._cancelled:  # once: a second cancel would cut its cleanup short
            self._cancelled = True
            self._stepper.cancel()

    async def _wait_for_response(self) -> None:
        if self._ready:
            return
        if not self._stepper.done():
            self._reader = reader = asyncio.get_running_loop().create_future()
            _wake(self._room)  # a reader that waits gets a step, read-ahead or not
            try:
                await reader
            finally:
                self._reader = None
        if not self._ready:
            end, self._end = self._end, None  # the error once, then the end
            raise end if end is not None else StopAsyncIteration

    async def _step_ahead(self) -> None:
        """Step the generator while a reader waits or fewer than ``read_ahead``
        responses are untaken; then close it (exhausted, failed, or cancelled by
        :meth:`cancel`)."""
        try:
            while True:
                if len(self._ready) >= self._read_ahead and self._reader is None:
                    self._room = asyncio.get_running_loop().create_future()
                    await self._room
                    continue
                self._ready.append(await self._step())
                _wake(self._reader)
                self._reader = None  # answered: the next step is read-ahead again
        except StopAsyncIteration:
            pass
        except Exception as error:  # the model's error (an InferdError)
            self._end = error
        finally:
            await self._close()
            self._finish()
            _wake(self._reader)

    async def _step(self) -> InferenceResponse:
        return await self._loaded.next_async(self._responses)

    async def _close(self) -> None:
        """Stop the generator: its ``finally`` runs (a generator that ended already is
        left as it is)."""
        try:
            await self._responses.aclose()  # type: ignore[attr-defined]
        except Exception:
            logger.exception("Closing the stream of model %r raised", self._loaded.model.name)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
