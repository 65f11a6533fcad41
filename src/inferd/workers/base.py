"""The interface every pool offers the scheduler and the registry, and the slot contract.

A model instance has a number of slots (its capacity): requests it may run at
once. The scheduler counts them; a pool starts a request on a slot and returns
an :class:`Execution`, which says when that slot is free again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

from inferd.observability.trace_record import BatchRun
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, ModelMetadata

if TYPE_CHECKING:
    from inferd.workers.loaded_model import LoadedModel

Answer = Coroutine[Any, Any, InferenceResponse]
# One live holder of an instance, for sequences that must stay where their state is:
# (worker index, how many times that worker has started). A restarted worker is a
# new holder: the state its previous process kept is gone. In process: (-1, 1).
Holder = tuple[int, int]


@dataclass(slots=True, frozen=True)
class Execution:
    """A request a pool has started on one of an instance's slots.

    Two kinds, because work in the main process can be stopped and work in a
    worker process cannot:

    - :meth:`inline`: a coroutine that runs the model as it is awaited. Cancelling
      its awaiter stops it; the slot is free once it has returned, raised, or been
      dropped unstarted.
    - :meth:`sent`: a future for a request already sent to a worker process. The
      slot stays taken until the future is done (the worker answers), whatever the
      awaiter does; otherwise requests would pile up in the worker beyond its
      capacity and beyond the queue's bound. An awaiter cancelled (its client
      left) calls ``cancel``: the worker is asked to cancel the call (an async
      ``predict`` is cancelled there, and the calls it makes to other models with
      it), and answers sooner.
    """

    _answer: Answer | asyncio.Future[InferenceResponse]
    _detached: bool
    _cancel: Callable[[], None] | None = None

    @classmethod
    def inline(cls, answer: Answer) -> Execution:
        return cls(answer, False)

    @classmethod
    def sent(
        cls, answer: asyncio.Future[InferenceResponse], cancel: Callable[[], None] | None = None
    ) -> Execution:
        return cls(answer, True, cancel)

    @classmethod
    def failed(cls, error: BaseException) -> Execution:
        """A request that could not start; its slot is free at once."""
        future: asyncio.Future[InferenceResponse] = asyncio.get_running_loop().create_future()
        future.set_exception(error)
        return cls(future, True)

    async def result(self) -> InferenceResponse:
        """The response. Cancelling this stops inline work, and asks a worker to stop
        sent work (``cancel``), whose slot stays taken until it answers."""
        if self._detached:
            answer = self._answer
            try:
                return await asyncio.shield(answer)
            except asyncio.CancelledError:
                assert isinstance(answer, asyncio.Future)
                if self._cancel is not None and not answer.done():
                    self._cancel()
                raise
        return await self._answer

    def as_future(self) -> asyncio.Future[InferenceResponse]:
        """The response as a future that nobody's cancellation stops (a batch's run)."""
        return asyncio.ensure_future(self._answer)

    def when_free(self, release: Callable[[], None]) -> None:
        """Call ``release`` once the slot is free; for an awaiter that stopped waiting."""
        answer = self._answer
        if not self._detached:
            assert asyncio.iscoroutine(answer)
            answer.close()  # unstarted: it never runs; finished: nothing happens
            release()
            return
        assert isinstance(answer, asyncio.Future)

        def done(finished: asyncio.Future[InferenceResponse]) -> None:
            if not finished.cancelled():
                finished.exception()  # retrieved: nobody is left to see it
            release()

        answer.add_done_callback(done)


@dataclass(frozen=True, slots=True)
class LoadedInstance:
    """What loading an instance tells the server about it."""

    metadata: ModelMetadata
    predicts: bool = True  # the runtime implements predict
    streams: bool = False  # the runtime implements predict_stream
    # predict_stream is an async generator: its streams run interleaved on an event
    # loop and hold no slot. A plain generator's stream holds one (a thread) for its life.
    interleaved_streams: bool = False
    # The runtime reads request headers / sets response headers (serving/runtime_headers.py).
    wants_headers: bool = False
    # REST routes the runtime serves itself: (method, path, handler name),
    # server/rest/custom_routes.py.
    custom_routes: tuple[tuple[str, str, str], ...] = ()
    # The OpenAI-compatible endpoints it answers ("completions", "chat", "embeddings";
    # inferd/generation.py), server/openai/.
    openai_endpoints: tuple[str, ...] = ()
    # Its LoRA adapters, each answering /v1 as a model of its own name
    # (GenerationRequest.adapter).
    openai_adapters: tuple[str, ...] = ()
    # How many workers hold it, as the model host answers a bind (host/edge.py);
    # None from a pool, whose slots say it.
    instances: int | None = None
    # Why what serves is not what was loaded last ("": it is): a model host's version
    # whose reload failed keeps its previous instance, and says so in the index.
    reason: str = ""


class ResponseStream(Protocol):
    """The responses of one ``predict_stream`` call, in the order the model yields them.

    Iterating raises the model's error (an InferdError) where it failed, and ends
    when the generator is exhausted. The pool never runs more than a bounded number
    of responses ahead of the reader (back-pressure), so a slow reader pauses the
    generator instead of making the server buffer without bound.
    """

    def __aiter__(self) -> Self: ...

    async def __anext__(self) -> InferenceResponse: ...

    async def take(self) -> list[InferenceResponse]:
        """The next responses, in order: waits for one, then takes every one ready
        with it (a fast model's responses go on together, in one write where the
        protocol allows). Raises as ``__anext__`` does at the end or on an error."""
        ...

    def cancel(self) -> None:
        """Stop the generator where it runs (its ``finally`` runs there), in any state;
        a stream that already ended is left alone."""
        ...

    @property
    def finished(self) -> asyncio.Future[None]:
        """Done once the generator has stopped where it runs: exhausted, failed or
        cancelled. A slot the stream holds is free from then."""
        ...


async def taken(stream: ResponseStream) -> AsyncIterator[list[InferenceResponse]]:
    """``stream``'s responses as :meth:`ResponseStream.take` groups them, until it ends
    (its error raised where it failed). Cancelling the stream is the caller's."""
    while True:
        try:
            ready = await stream.take()
        except StopAsyncIteration:
            return
        yield ready


class StreamBase:
    """What the pools' ResponseStreams share: iterating themselves, and ``finished``."""

    def __init__(self) -> None:
        self._finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def finished(self) -> asyncio.Future[None]:
        return self._finished

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> InferenceResponse:
        raise NotImplementedError

    async def take(self) -> list[InferenceResponse]:
        """One response at a time, for a stream that cannot tell which are ready."""
        return [await self.__anext__()]

    def _finish(self) -> None:
        if not self._finished.done():
            self._finished.set_result(None)


@dataclass(slots=True)
class Call:
    """One request for an instance, with what travels with it to the runtime.

    What a feature needs from the pool for one call goes here, not into a new
    parameter or method of the pool: a sequence names its holder, a traced request
    carries its record.
    """

    instance_id: int
    request: InferenceRequest
    # Run on this holder only, never retried elsewhere (a sequence's state lives
    # there); WorkerLost if it is not serving the instance any more. None: any.
    holder: Holder | None = None
    # A traced request's record of its batch: where and when predict ran is noted there.
    run: BatchRun | None = None


@dataclass(frozen=True, slots=True)
class OnHolder:
    """Where a control message for one holder goes: the runtime of ``instance_id`` on
    ``holder`` (a sequence's). A holder that stopped meanwhile took its state along,
    so the message is dropped there."""

    instance_id: int
    holder: Holder


class WorkerState(Protocol):
    """What a control message reaches where runtimes run (a worker process, or the
    main process for the in-process pool)."""

    def loaded(self, instance_id: int) -> LoadedModel | None:
        """The runtime loaded there as ``instance_id``; None if it is not (any more)."""
        ...


class Control(Protocol):
    """A message for where runtimes run, outside any call: it answers nothing, and
    failures are logged. A feature defines its own (pickled to worker processes), so
    adding one touches the feature, not the pools or the worker IPC.

    Two routes, which :meth:`destination` picks:

    - ``None``: every process running runtimes, now and each time one (re)starts;
      the pools keep the latest message of each type and hand it to the processes
      they start later (a setting, such as a log level);
    - an :class:`OnHolder`: that holder only, after the commands sent there before
      (a sequence's end).
    """

    def destination(self) -> OnHolder | None: ...

    def apply_in_worker(self, worker: WorkerState) -> None:
        """Take effect where runtimes run; in a worker process, on the thread that reads
        commands, between the commands read before and after it."""
        ...


class Pool(Protocol):
    """Runs model instances, each known by an id the registry hands out.

    Its operations: the lifecycle (start, close, load, unload), starting a call
    (:meth:`predict`, :meth:`stream`), a control message (:meth:`control`), and
    what the dispatcher reads of an instance (its capacity, its holders, changes
    to them, and that the pool gave up on it).
    """

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def load(self, instance_id: int, settings: ModelSettings) -> LoadedInstance:
        """Load one model version; what it offers, or an InferdError saying why not."""
        ...

    async def unload(self, instance_id: int) -> None:
        """Unload an instance; one that is not loaded (or failed to load) is ignored."""
        ...

    def predict(self, call: Call) -> Execution:
        """Start the call on a free slot of its instance (the dispatcher keeps within
        its capacity; on ``call.holder``, within that holder's slots) and return at
        once. A call that cannot start raises (an InferdError saying why) and takes
        no slot."""
        ...

    def stream(self, call: Call) -> ResponseStream:
        """Start ``predict_stream`` for the call now and return its responses. A
        stream of a plain generator needs a free slot (the dispatcher keeps within
        the capacity); an interleaved one does not. Never retried elsewhere; a stream
        that cannot start raises."""
        ...

    def control(self, message: Control) -> None:
        """Deliver ``message`` where it applies, soon; failures are logged."""
        ...

    def capacity(self, instance_id: int) -> int:
        """How many requests the instance can run at once right now; 0 if none."""
        ...

    def restarting(self, instance_id: int) -> bool:
        """Whether the instance may serve again though its capacity is 0 now: its
        workers are being restarted (a request may wait for them, as for a busy one)."""
        ...

    def holders(self, instance_id: int) -> list[Holder]:
        """The live holders serving the instance now (empty: none)."""
        ...

    def watch(self, instance_id: int, on_change: Callable[[], None]) -> None:
        """Call ``on_change`` whenever the instance's capacity or holders change
        (a worker holding it died, or came back), until it is unloaded."""
        ...

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        """Call ``handler(instance_id, reason)`` when the pool gives up serving an
        instance on its own (e.g. its load keeps crashing the worker process)."""
        ...
