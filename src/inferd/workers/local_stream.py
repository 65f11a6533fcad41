"""A ``predict_stream`` run in this process, pulled by whoever reads it.

Used by the in-process pool (the reader is the request's handler) and by a
worker process (the reader is the task that ships each response to the main
process). Nothing runs ahead of the reader: each read asks the generator for
one more response, so back-pressure is the reader's pace.

Where each step runs: an async generator on the reader's event loop; a plain
generator in ``executor`` (a thread of the model's own), or inline on the loop
when there is none (the in-process pool with ``threads_per_worker: 1``, like a
plain ``predict`` there).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ..types import InferenceRequest, InferenceResponse
from .base import StreamBase
from .loaded_model import LoadedModel

logger = logging.getLogger(__name__)


class LocalStream(StreamBase):
    """One ``predict_stream`` call as a :class:`~inferd.workers.base.ResponseStream`."""

    def __init__(
        self,
        loaded: LoadedModel,
        request: InferenceRequest,
        executor: concurrent.futures.Executor | None = None,
    ) -> None:
        super().__init__()
        self._loaded = loaded
        self._executor = executor
        self._responses = loaded.open_stream(request)
        self._stepping = False  # a step is running (in a thread, or awaited)
        self._thread_step: concurrent.futures.Future[Any] | None = None
        self._cancelled = False

    async def __anext__(self) -> InferenceResponse:
        if self._finished.done():
            raise StopAsyncIteration
        self._stepping = True
        try:
            return await self._step()
        except StopAsyncIteration:
            self._finish()
            raise StopAsyncIteration from None
        except BaseException:  # the model's error, or the reader was cancelled mid-step
            self._close()
            raise
        finally:
            self._stepping = False
            if self._cancelled:
                self._close()

    def cancel(self) -> None:
        if self._finished.done():
            return
        self._cancelled = True
        if not self._stepping:  # else the step closes it as soon as it returns
            self._close()

    async def _step(self) -> InferenceResponse:
        responses = self._responses
        if isinstance(responses, AsyncIterator):
            return await self._loaded.next_async(responses)
        if self._executor is None:
            return self._next_or_stop(responses)
        run = contextvars.copy_context().run
        self._thread_step = self._executor.submit(run, self._next_or_stop, responses)
        response: InferenceResponse = await asyncio.wrap_future(self._thread_step)
        return response

    def _next_or_stop(self, responses: Iterator[InferenceResponse]) -> InferenceResponse:
        # StopIteration cannot leave a coroutine or cross a future (both turn it into
        # a RuntimeError).
        try:
            return self._loaded.next_sync(responses)
        except StopIteration:
            raise StopAsyncIteration from None

    def _close(self) -> None:
        """Stop the generator (its ``finally`` runs) and mark the stream finished."""
        if self._finished.done():
            return
        responses = self._responses
        if isinstance(responses, AsyncIterator):
            closing = asyncio.ensure_future(responses.aclose())  # type: ignore[attr-defined]
            closing.add_done_callback(self._closed)
            return
        step = self._thread_step
        if step is not None and not step.done():
            # Its thread is still inside the generator (the reader stopped waiting):
            # close it once that step returns, from this loop.
            loop = asyncio.get_running_loop()
            step.add_done_callback(lambda _: loop.call_soon_threadsafe(self._close))
            return
        try:
            responses.close()  # type: ignore[attr-defined]
        except Exception:
            logger.exception("Closing the stream of model %r raised", self._loaded.model.name)
        finally:
            self._finish()

    def _closed(self, closing: asyncio.Future[None]) -> None:
        if not closing.cancelled() and closing.exception() is not None:
            logger.error(
                "Closing the stream of model %r raised",
                self._loaded.model.name,
                exc_info=closing.exception(),
            )
        self._finish()
