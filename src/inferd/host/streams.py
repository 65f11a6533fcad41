"""One stream the model host runs for a protocol process, with credit.

The host's side of :mod:`inferd.workers.remote_stream`, on the host's event loop
(the worker's thread-based version is :mod:`inferd.workers.worker_streams`). A
:class:`HostStream` pulls ``DataPlane.infer_stream`` and sends each list of
responses it yields as one ``STREAMED`` reply while it holds credit, through the
:class:`~inferd.workers.stream_credit.CreditPump` that a worker's async streams
use too: a slow reader pauses the model's generator here (the dispatch layer's
own stream bounds how far the generator runs ahead).

``Cancel`` stops the generator (its ``finally`` runs) and answers ``ENDED``; the
last reply, ``ENDED`` or ``ERROR``, is sent once the generator has stopped. When
the connection is lost the task is cancelled and sends nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable

from inferd.context import RequestContext
from inferd.errors import ModelError
from inferd.serving.runtime_headers import HEADERS
from inferd.types import InferenceResponse
from inferd.workers import ipc, messages
from inferd.workers.stream_credit import CreditPump

logger = logging.getLogger(__name__)

Responses = AsyncGenerator[list[InferenceResponse], None]
Send = Callable[[list[ipc.Buffer]], None]


class HostStream:
    """One ``Stream`` call, by its call id; :meth:`run` is its task."""

    __slots__ = ("_call_id", "_context", "_credit", "_reply_error", "_send")

    def __init__(
        self,
        call_id: int,
        credit: int,
        context: RequestContext,
        send: Send,
        reply_error: Callable[[int, BaseException], None],
    ) -> None:
        self._call_id = call_id
        self._reply_error = reply_error
        self._credit: CreditPump[InferenceResponse] = CreditPump(credit)
        self._context = context
        self._send = send

    def grant(self, credit: int) -> None:
        self._credit.grant(credit)

    def cancel(self) -> None:
        """Cancel: stop the generator, where it awaits too (it gets CancelledError)."""
        self._credit.stop()

    async def run(self, open_responses: Callable[[], Responses]) -> None:
        """Pull the responses, then send the stream's last reply. ``open_responses``
        is called here, so that what it raises ends the stream with an ERROR."""
        try:
            async with contextlib.aclosing(open_responses()) as responses:
                await self._credit.pump(responses.__anext__, self._send_responses, True)
        except asyncio.CancelledError:
            if not self._credit.cancelled:
                raise  # the connection is gone: nobody to answer
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the cancel was ours, and is answered below
        except Exception as error:
            self._reply_error(self._call_id, error)
            return
        self._send(messages.encode_reply(messages.ENDED, self._call_id, None))

    def _send_responses(self, responses: list[InferenceResponse]) -> None:
        try:
            packed = [ipc.pack_response(response) for response in responses]
            headers = self._context.response_headers
            if headers:  # a predict-only model's answer: the dataplane moved them out
                self._context.response_headers = None
                packed[0] = with_headers(packed[0], headers)
            pieces = messages.encode_reply(messages.STREAMED, self._call_id, packed)
        except Exception as error:
            raise ModelError(f"The model host cannot send the response back: {error}") from error
        self._send(pieces)


def with_headers(packed: ipc.PackedResponse, headers: dict[str, str]) -> ipc.PackedResponse:
    """``packed`` with the runtime's response headers back in its parameters (in a copy:
    the response may be the response cache's), for the protocol process to take them
    out as a lone server's dataplane does."""
    outputs, name, version, response_id, parameters = packed
    return outputs, name, version, response_id, {**parameters, HEADERS: headers}
