"""The process pool's requests in flight in worker processes, followed until answered.

A worker process can die with requests in flight: it crashed, someone killed it,
or it was killed because one of its calls ran past its model's
``inference_timeout``. A request it had not read yet (sent after it died, before
the pool noticed: the worker says which requests it read before running them,
messages.READ) never ran there: it is sent to another worker, and that does not
count as its retry. A request that was the only one running there (the only one
read, with no stream) is the suspect: its own predict may be what killed the
worker (``os._exit``, a segfault, memory), and sent again it would kill the next
worker too, and the requests of both. It is answered WorkerLost (503) saying so,
not retried. Requests that ran alongside others did not fail by any fault of
their own as far as anyone knows, so each is sent once more, to a free slot of
another worker holding its model or of the restarted one. Once only: a request
that was running when two workers died may be what kills them. Retries go before
new requests (the pool sends them
first whenever a slot of the instance frees or a holder comes back), and never
beyond a worker's slots, because an ``inference_timeout`` counts from the send:
a retry queued inside a busy worker could be killed for another request's time.
A retry that finds no slot within ``retry_wait`` seconds fails with WorkerLost.

A model whose predict must not run twice for one request opts out with
``retry_on_worker_failure: false``; a model with neither a retry nor a timeout
is not followed at all (the pool hands out the worker's own future). Streams
are never retried: what they already sent cannot be taken back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from inferd.errors import InferdError, InferenceTimeout, WorkerLost, WorkerLostUnread
from inferd.observability.stats import ModelStatsTable
from inferd.settings import ModelSettings
from inferd.types import InferenceResponse
from inferd.workers.base import Call
from inferd.workers.overrun import InferenceTimer
from inferd.workers.process import WorkerProcess

logger = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class SentCall:
    """One request the pool sent to a worker, followed until it is answered.

    ``answer`` is what the scheduler awaits; each attempt at running the request is
    a ``running`` future of the worker it was sent to.
    """

    call: Call
    settings: ModelSettings
    answer: asyncio.Future[InferenceResponse]
    worker: WorkerProcess | None = None
    running: asyncio.Future[InferenceResponse] | None = None
    # The worker that died running it ("" while it has not been retried).
    lost_on: str = ""
    # The last worker that died before reading it ("": none did).
    unread_on: str = ""
    # While it waits for a free slot to be sent again: the bound on that wait.
    expiry: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        """Its awaiter left: the worker running it is asked to cancel it."""
        if self.worker is not None and self.running is not None and not self.running.done():
            self.worker.cancel(self.running)


def failure_to_answer(sent: SentCall, error: BaseException, closing: bool) -> BaseException | None:
    """What ``sent`` answers now that its attempt failed with ``error``; None: it is
    retried instead (its worker died, its model allows it, other requests were running
    there too, it was not retried yet, and the server is not shutting down)."""
    if not isinstance(error, WorkerLost) or closing:
        return error
    if not sent.settings.retry_on_worker_failure:
        return error
    if isinstance(error, WorkerLostUnread):
        return None  # it never ran: whatever killed the worker, it was not this request
    worker = sent.worker
    if worker is not None and worker.running_at_death == 1:
        return suspect_error(sent, worker)
    if sent.lost_on:
        return WorkerLost(
            f"{error.message} It had already been sent again once, after {sent.lost_on} "
            "stopped while running it; a request is retried only once."
        )
    return None


def suspect_error(sent: SentCall, worker: WorkerProcess) -> WorkerLost:
    """What the only request running on ``worker`` when it died answers: it is the
    suspect, and is not retried."""
    logger.warning(
        "%s died running only a request of %s: it is answered 503, not retried",
        worker.label,
        sent.settings.label,
    )
    return WorkerLost(
        f"The worker process running this request ({worker.label}) died while running "
        "it, and it was the only request running there: it may be what killed the "
        "worker, so it was not retried (another worker would die the same way). The "
        "worker is being restarted."
    )


class SentCalls:
    """Sends requests to workers and follows them: retries, timeouts.

    ``free_holder(instance_id)`` is a live worker holding the instance with a free
    slot, if any; ``unservable(instance_id)`` says why the instance will not be
    served again (None: it may be, if not right now).
    """

    def __init__(
        self,
        free_holder: Callable[[int], WorkerProcess | None],
        unservable: Callable[[int], InferdError | None],
        retry_wait: float,
        stats: ModelStatsTable | None = None,
    ) -> None:
        self._free_holder = free_holder
        self._unservable = unservable
        self._retry_wait = retry_wait
        self._stats = stats
        self._timer: InferenceTimer[SentCall] = InferenceTimer(self._overran)
        # Per instance, retries waiting for a free slot, oldest first.
        self._retries: dict[int, deque[SentCall]] = {}
        self._closing = False

    def send(self, call: Call, settings: ModelSettings, worker: WorkerProcess) -> SentCall:
        """Send the call to ``worker`` now; its ``answer`` gets the final answer."""
        answer: asyncio.Future[InferenceResponse] = asyncio.get_running_loop().create_future()
        sent = SentCall(call, settings, answer)
        self._send(sent, worker)
        return sent

    def send_retries(self, instance_id: int) -> None:
        """Send the instance's waiting retries, oldest first, while a slot is free."""
        retries = self._retries.get(instance_id)
        while retries:
            worker = self._free_holder(instance_id)
            if worker is None:
                return
            sent = retries.popleft()
            if sent.expiry is not None:
                sent.expiry.cancel()
            try:
                self._send(sent, worker)
            except InferdError as error:  # it died just now: this runs in callbacks,
                sent.answer.set_exception(error)  # where a raise would leave it hanging
        if retries is not None and not retries:
            del self._retries[instance_id]  # so that a finished call checks one empty dict

    def unservable(self, instance_id: int, error: InferdError) -> None:
        """The instance will not be served again: its waiting retries fail with ``error``."""
        for sent in self._retries.pop(instance_id, ()):
            if sent.expiry is not None:
                sent.expiry.cancel()
            if not sent.answer.done():
                sent.answer.set_exception(error)

    def close(self) -> None:
        """The server is shutting down: nothing more is retried or timed."""
        self._closing = True
        self._timer.close()
        for instance_id in list(self._retries):
            self.unservable(instance_id, WorkerLost("The server is shutting down"))

    def _send(self, sent: SentCall, worker: WorkerProcess) -> None:
        sent.worker = worker
        ended = partial(self._attempt_ended, sent)
        sent.running = worker.predict(sent.call, ended)
        limit = sent.settings.inference_timeout
        if limit:
            self._timer.started(sent, sent.call.instance_id, limit)

    def _attempt_ended(self, sent: SentCall, running: asyncio.Future[InferenceResponse]) -> None:
        if sent.settings.inference_timeout:
            self._timer.finished(sent, sent.call.instance_id)
        if self._retries and self._retries.get(sent.call.instance_id):
            self.send_retries(sent.call.instance_id)  # its slot is free now
        if running.cancelled():
            sent.answer.cancel()
            return
        error = running.exception()
        if sent.answer.done():
            return  # it ran past its time and was answered then
        if error is None:
            sent.answer.set_result(running.result())
            return
        answer = failure_to_answer(sent, error, self._closing)
        if answer is None:
            self._retry(sent, isinstance(error, WorkerLostUnread))
        else:
            sent.answer.set_exception(answer)

    def _retry(self, sent: SentCall, unread: bool) -> None:
        assert sent.worker is not None  # it was sent
        if unread:
            sent.unread_on = sent.worker.label
            logger.warning(
                "%s stopped before reading a request of %s; sending it to another worker",
                sent.worker.label,
                sent.settings.label,
            )
        else:
            sent.lost_on = sent.worker.label
            logger.warning(
                "%s stopped while running a request of %s; sending it again",
                sent.worker.label,
                sent.settings.label,
            )
        error = self._unservable(sent.call.instance_id)
        if error is not None:
            sent.answer.set_exception(error)
            return
        sent.expiry = asyncio.get_running_loop().call_later(
            self._retry_wait, self._retry_expired, sent
        )
        self._retries.setdefault(sent.call.instance_id, deque()).append(sent)
        self.send_retries(sent.call.instance_id)

    def _retry_expired(self, sent: SentCall) -> None:
        retries = self._retries.get(sent.call.instance_id)
        if retries is not None:
            with contextlib.suppress(ValueError):
                retries.remove(sent)
            if not retries:
                del self._retries[sent.call.instance_id]
        if not sent.answer.done():
            if sent.lost_on:
                lost = f"{sent.lost_on} stopped while running this request"
            else:
                lost = f"{sent.unread_on} stopped before reading this request"
            sent.answer.set_exception(
                WorkerLost(
                    f"{lost}, and no worker process holding {sent.settings.label} was free "
                    f"to run it again within {self._retry_wait:g}s; retry the request"
                )
            )

    def _overran(self, sent: SentCall) -> None:
        """The call ran past its inference_timeout: answer 504 and kill its worker."""
        worker, running = sent.worker, sent.running
        if worker is None or running is None or running.done() or sent.answer.done():
            return  # answered as the timer fired: that stands
        if not worker.alive:
            return  # it died as the timer fired: the call is retried or failed as such
        settings = sent.settings
        reason = (
            f"{settings.label} ran past its inference_timeout of {settings.inference_timeout:g}s"
        )
        if self._stats is not None:
            self._stats.of(settings.name, settings.version).timed_out()
        sent.answer.set_exception(
            InferenceTimeout(
                f"{reason[:1].upper()}{reason[1:]}; the worker process running it "
                f"({worker.label}) was killed and is being restarted"
            )
        )
        worker.kill(reason)
