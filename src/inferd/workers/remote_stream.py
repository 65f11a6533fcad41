"""A ``predict_stream`` running in a worker process, as the main process reads it.

The worker runs the generator (:mod:`inferd.workers.worker_streams`) and sends
each response the moment it is yielded (those ready together in one message);
the channel hands them to the stream's :class:`RemoteStream`, whose reader takes
the responses in order.

Back-pressure is credit-based. The worker steps the generator only while it
holds credit: a stream starts with ``STREAM_WINDOW`` (64) responses' worth and
each response sent spends one. The reader gives credit back as it takes
responses, ``STREAM_WINDOW // 4`` (16) at a time, in one ``Credit`` message. So:

- at most ``STREAM_WINDOW`` responses are ever produced and not yet taken by the
  reader (queued here or on the socket): a slow reader pauses the generator in
  the worker instead of growing memory here;
- a fast stream costs one credit message per 16 responses, and the worker does
  not wait for credit while the reader keeps up: it still holds three quarters
  of the window when a grant leaves, so it goes on producing (and sending the
  responses ready together in one message) while the grant travels. With half
  the window it stalled, waiting for each grant, once it sent whole batches.

Cancelling (the client left) sends ``Cancel``: the worker stops the generator
(its ``finally`` runs there) and answers ``ENDED``, which resolves
:attr:`RemoteStream.finished`; an error ends a stream the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from inferd.errors import ModelError
from inferd.types import InferenceResponse
from inferd.workers import ipc, messages
from inferd.workers.base import StreamBase

logger = logging.getLogger(__name__)

STREAM_WINDOW = 64

# Sends a command about this stream to its worker: its Credit or its Cancel.
SendCommand = Callable[[messages.Credit | messages.Cancel], None]


class RemoteStream(StreamBase):
    """One stream's responses as they arrive from the worker (a ResponseStream).

    Fed by the channel on the event loop: :meth:`received` for each response and
    :meth:`ended` for the worker's last word (or the loss of the worker).
    """

    def __init__(self, send: SendCommand, window: int = STREAM_WINDOW) -> None:
        super().__init__()
        self._send = send
        self.window = window
        self._credit_batch = max(window // 4, 1)
        self._responses: deque[ipc.PackedResponse] = deque()
        self._waiter: asyncio.Future[None] | None = None  # the reader waits for a response
        self._taken = 0  # responses taken since credit was last given back
        self._error: Exception | None = None  # where the stream failed, for the reader
        self._cancelled = False

    async def __anext__(self) -> InferenceResponse:
        await self._wait_for_response()
        packed = self._responses.popleft()
        self._took(1)
        return self._unpacked(packed)

    async def take(self) -> list[InferenceResponse]:
        await self._wait_for_response()
        packed = list(self._responses)
        self._responses.clear()
        self._took(len(packed))
        return [self._unpacked(one) for one in packed]

    async def _wait_for_response(self) -> None:
        if self._responses:
            return
        if not (self._cancelled or self._finished.done()):
            self._waiter = waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        if not self._responses:
            raise self._end_of_reading()

    def _took(self, count: int) -> None:
        """Give credit back once the reader has taken a batch's worth."""
        self._taken += count
        if self._taken >= self._credit_batch and not self._finished.done():
            self._send(messages.Credit(self._taken))
            self._taken = 0

    def _unpacked(self, packed: ipc.PackedResponse) -> InferenceResponse:
        try:
            return ipc.unpack_response(packed)
        except Exception as error:
            logger.exception("A response from a worker's stream cannot be read")
            self.cancel()
            raise ModelError(f"The worker's answer cannot be read: {error}") from error

    def _end_of_reading(self) -> BaseException:
        """What the reader gets once the responses are all taken: the error once, then
        the end."""
        error, self._error = self._error, None
        return error if error is not None else StopAsyncIteration()

    def cancel(self) -> None:
        if self._cancelled or self._finished.done():
            return
        self._cancelled = True
        self._responses.clear()
        self._send(messages.Cancel())
        self._wake_reader()

    # Fed by the channel

    def received(self, packed: list[ipc.PackedResponse]) -> None:
        """The worker sent the next responses (those it had ready together)."""
        if self._cancelled:
            return  # sent before the worker saw the cancel: nobody reads it
        self._responses.extend(packed)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def ended(self, error: Exception | None = None) -> None:
        """The generator stopped in the worker: exhausted or cancelled (None), failed
        with ``error``, or the worker is gone (WorkerLost)."""
        if self._finished.done():
            return
        if not self._cancelled:
            self._error = error
        self._finish()
        self._wake_reader()

    def _wake_reader(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
