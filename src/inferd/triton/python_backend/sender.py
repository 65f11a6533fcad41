"""The decoupled response sender: ``request.get_response_sender().send(...)``.

A model may send from ``execute`` or from any thread it started, before or after
``execute`` returned; each response reaches the event loop that streams it to the
client through ``call_soon_threadsafe``. ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL``
ends the request's responses (with or without a last response); a send after that
is a TritonModelException, as in Triton.
"""

from __future__ import annotations

import asyncio
import threading

from inferd.triton.python_backend.tensor import InferenceResponse, TritonModelException

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

# What the stream reads: a response (or None), and whether it is the last.
Sent = tuple[InferenceResponse | None, bool]


class ResponseSender:
    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Sent]) -> None:
        self._loop = loop
        self._queue = queue
        self._lock = threading.Lock()
        self._closed = False
        self._cancelled = threading.Event()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("send() without a response needs the final flag")
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send() takes a pb_utils.InferenceResponse, got {type(response).__name__}"
            )
        with self._lock:
            if self._closed:
                raise TritonModelException(
                    "Unable to send: the final flag has already been sent for this request"
                )
            self._closed = final
        if self._loop.is_closed():
            return  # the server stopped: nobody is left to read it
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (response, final))

    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def queue(self) -> asyncio.Queue[Sent]:
        """Where the runtime reads what was sent."""
        return self._queue

    @property
    def finished(self) -> bool:
        return self._closed
