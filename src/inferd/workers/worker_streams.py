"""The streams a worker process runs, each sending its responses as they are yielded.

The worker's command thread starts them (``Stream``) and passes on each credit
grant and cancel, then reads on; a stream never runs on it. Two kinds:

- An async generator runs as a :class:`LocalStream` pulled by a task on the
  worker's event loop, interleaved with the other streams and async predicts
  there. Its commands reach the loop with ``call_soon_threadsafe`` (in order).
- A plain generator runs to its end in one thread of its model's
  (:meth:`LoadedModel.own_threads`: the slot it holds), which steps it and
  sends each response itself. Stepping it from the loop instead costs two
  thread hops per response (measured on a busy 2-core machine: ~3.6k
  responses/s through one worker, against ~25k this way).

Either steps the generator only while the stream holds credit (see
:mod:`inferd.workers.remote_stream` for the window), and waits for a grant when
it has none, so a slow reader in the main process pauses the generator here. A
cancel stops the generator (its ``finally`` runs): at once when it waits for
credit; an async generator also while it awaits (it gets CancelledError there);
a plain generator as soon as its current step returns. The stream's last reply,
``ENDED`` or ``ERROR``, is sent once the generator has stopped, so the main
process frees the stream's slot only then.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Protocol

from inferd.errors import ModelError
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers import ipc, messages
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.local_stream import LocalStream
from inferd.workers.stream_credit import CreditPump

logger = logging.getLogger(__name__)

Send = Callable[[list[ipc.Buffer]], None]
ReplyError = Callable[[int, BaseException], None]
SendResponses = Callable[[list[InferenceResponse]], None]
End = Callable[[Exception | None], None]  # the generator stopped: None, or where it failed


class _Stream(Protocol):
    def grant(self, credit: int) -> None: ...

    def cancel(self) -> None: ...


class WorkerStreams:
    """The streams running in one worker, by call id. Its methods are called on the
    command thread; each stream removes itself when it ends (on the loop, or in its
    thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Send, reply_error: ReplyError):
        self._loop = loop
        self._send = send
        self._reply_error = reply_error
        self._running: dict[int, _Stream] = {}

    def __len__(self) -> int:
        return len(self._running)

    def start(
        self, call_id: int, loaded: LoadedModel, request: InferenceRequest, credit: int
    ) -> None:
        """Start ``predict_stream`` with ``credit`` responses it may send at once."""
        send_responses = partial(self._send_responses, call_id)
        end = partial(self._end, call_id)
        # Known before it starts: it may end (and remove itself) at once.
        if loaded.interleaved_streams:
            interleaved = _InterleavedStream(self._loop, credit, send_responses, end)
            self._running[call_id] = interleaved
            self._loop.call_soon_threadsafe(interleaved.start, loaded, request)
            return
        threaded = _ThreadedStream(loaded, request, credit, send_responses, end)
        self._running[call_id] = threaded
        try:
            loaded.own_threads().submit(threaded.run)
        except RuntimeError as error:  # its threads were shut down: it is being unloaded
            end(ModelError(f"Model {loaded.model.name!r} is being unloaded: {error}"))

    def grant(self, call_id: int, credit: int) -> None:
        stream = self._running.get(call_id)
        if stream is not None:  # else it ended meanwhile
            stream.grant(credit)

    def cancel(self, call_id: int) -> None:
        stream = self._running.get(call_id)
        if stream is not None:  # else it ended meanwhile: its last reply is on its way
            stream.cancel()

    def cancel_all(self) -> None:
        """The main process is gone: stop every generator (threads waiting wake up)."""
        for stream in list(self._running.values()):
            stream.cancel()

    def _send_responses(self, call_id: int, responses: list[InferenceResponse]) -> None:
        """Send responses of a stream, in order, in one message."""
        try:
            packed = [ipc.pack_response(response) for response in responses]
            pieces = messages.encode_reply(messages.STREAMED, call_id, packed)
        except Exception as error:
            raise ModelError(f"The worker cannot send the response back: {error}") from error
        self._send(pieces)

    def _end(self, call_id: int, error: Exception | None) -> None:
        self._running.pop(call_id, None)
        if error is None:
            self._send(messages.encode_reply(messages.ENDED, call_id, None))
        else:
            self._reply_error(call_id, error)


class _ThreadedStream:
    """A plain generator's stream, run to its end by :meth:`run` in one thread."""

    def __init__(
        self,
        loaded: LoadedModel,
        request: InferenceRequest,
        credit: int,
        send_responses: SendResponses,
        end: End,
    ) -> None:
        self._loaded = loaded
        self._request = request
        self._send_responses = send_responses
        self._end = end
        self._changed = threading.Condition(threading.Lock())  # credit granted, or cancel
        self._credit = credit
        self._cancelled = False

    def grant(self, credit: int) -> None:
        with self._changed:
            self._credit += credit
            self._changed.notify()

    def cancel(self) -> None:
        with self._changed:
            self._cancelled = True
            self._changed.notify()

    def run(self) -> None:
        loaded = self._loaded
        error: Exception | None = None
        responses: Iterator[InferenceResponse] | None = None
        try:
            opened = loaded.open_stream(self._request)
            if not isinstance(opened, Iterator):
                raise ModelError(
                    f"Model {loaded.model.name!r}: predict_stream is a plain def returning "
                    "an async iterator; write it as an async def with yield"
                )
            responses = opened
            while self._take_credit():
                try:
                    response = loaded.next_sync(responses)
                except StopIteration:
                    break
                self._send_responses([response])
        except Exception as raised:  # the model's error (an InferdError), or a send's
            error = raised
        finally:
            if responses is not None:
                self._close(responses)
        self._end(error)

    def _take_credit(self) -> bool:
        """Spend one credit, waiting for a grant if there is none; False once cancelled."""
        with self._changed:
            while self._credit <= 0 and not self._cancelled:
                self._changed.wait()
            if self._cancelled:
                return False
            self._credit -= 1
            return True

    def _close(self, responses: Iterator[InferenceResponse]) -> None:
        try:
            responses.close()  # type: ignore[attr-defined]
        except Exception:
            logger.exception("Closing the stream of model %r raised", self._loaded.model.name)


class _InterleavedStream:
    """An async generator's stream: a task on the worker's loop pulls its LocalStream
    through a :class:`CreditPump`. Its state is touched on the loop only; grant and
    cancel hop there."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        credit: int,
        send_responses: SendResponses,
        end: End,
    ) -> None:
        self._loop = loop
        self._credit: CreditPump[InferenceResponse] = CreditPump(credit)
        self._send_responses = send_responses
        self._end = end
        self._responses: LocalStream | None = None
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps weak references

    def grant(self, credit: int) -> None:
        self._loop.call_soon_threadsafe(self._granted, credit)

    def cancel(self) -> None:
        self._loop.call_soon_threadsafe(self._cancel)

    def start(self, loaded: LoadedModel, request: InferenceRequest) -> None:
        """Call ``predict_stream`` and start pulling it (on the loop)."""
        try:
            # It runs ahead only as far as the credit covers (see _send).
            self._responses = LocalStream(loaded, request, read_ahead=self._credit.credit)
        except Exception as error:  # predict_stream raised, or returned no generator
            self._end(error)
            return
        self._task = self._loop.create_task(self._run(self._responses))

    def _granted(self, credit: int) -> None:
        if self._responses is not None:
            self._responses.allow_ahead(self._credit.credit + credit)
        self._credit.grant(credit)

    def _cancel(self) -> None:
        # Its stepper task stops the generator, where it awaits too, and the pump stops.
        if self._responses is not None and self._credit.stop():
            self._responses.cancel()

    async def _run(self, responses: LocalStream) -> None:
        error: Exception | None = None
        try:
            await self._credit.pump(responses.take, partial(self._send, responses), False)
        except asyncio.CancelledError:
            pass  # the loop is stopping: the generator is stopped below
        except Exception as raised:  # the model's error (an InferdError), or a send's
            error = raised
        responses.cancel()  # nothing happens if it stopped already
        await responses.finished
        self._end(error)

    def _send(self, responses: LocalStream, ready: list[InferenceResponse]) -> None:
        """Send the responses ready together in one message. The stream never runs
        further ahead than the credit left: what it made and what it may make fit in it."""
        responses.allow_ahead(self._credit.credit)
        self._send_responses(ready)
