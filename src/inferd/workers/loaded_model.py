"""A loaded runtime and the one way to call it, shared by both kinds of pool.

Each pool decides only *where* a call runs (the event loop, a thread of the
model's own, a worker's loop); what a call does is here, once: label the
custom metrics the runtime logs with its model, run ``predict``, check what it
returned, and turn what it raised into the error the client sees.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextvars import Token
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from inferd import custom_metrics, model_calls
from inferd.errors import ConfigurationError, InferdError, ModelError
from inferd.model import Model, WorkerContext, overrides
from inferd.settings import ModelSettings
from inferd.tensors.datatypes import datatype_of
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers.base import LoadedInstance
from inferd.workers.runtime_loader import describe, load_runtime
from inferd.workers.warmup import warm_up

logger = logging.getLogger(__name__)


class InlinePredict(Protocol):
    """A runtime whose ``async def predict`` can, for some requests, run to its end on
    the calling thread without an event loop (MLServer ``MLModel`` runtimes whose
    predict never awaits: inferd.compat.inline)."""

    def predicts_inline(self, request: InferenceRequest) -> bool: ...

    def predict_inline(self, request: InferenceRequest) -> InferenceResponse: ...


@dataclass(slots=True)
class LoadedModel:
    """A loaded runtime, how it is called, and the labels of the metrics it logs."""

    model: Model
    is_async: bool
    # Runs a plain predict when threads_per_worker > 1 (None: called inline).
    threads: concurrent.futures.ThreadPoolExecutor | None
    labels: custom_metrics.ModelLabels
    # Runs a plain call off the loop when ``threads`` is None (made on first use): a
    # plain predict_stream, so a worker's command thread or the event loop reads on,
    # and in process a plain predict not measured quick, so the event loop does
    # (own_threads).
    own_thread: concurrent.futures.ThreadPoolExecutor | None = None
    # The runtime, when its async predict may run inline (see runs_inline).
    inline: InlinePredict | None = None
    # In process, a plain predict's recent time (a moving average, inprocess.py): one
    # not measured yet (None) or slow runs off the event loop.
    recent_call_seconds: float | None = None

    @classmethod
    async def load(cls, settings: ModelSettings, context: WorkerContext) -> LoadedModel:
        """Load the model's runtime and run its warmup requests (``model_warmup``);
        ModelError or ConfigurationError when either fails."""
        labels = custom_metrics.model_labels(settings.name, settings.version)
        token = custom_metrics.set_model(labels)  # load() may log custom metrics too
        try:
            model = await load_runtime(settings, context)
        finally:
            custom_metrics.reset_model(token)
        return await cls.adopt(model)

    @classmethod
    async def adopt(cls, model: Model) -> LoadedModel:
        """A runtime loaded already (here, or in the fork parent this worker was forked
        from), after its warmup requests ran here; as :meth:`load` for the errors."""
        settings = model.settings
        labels = custom_metrics.model_labels(settings.name, settings.version)
        try:
            loaded = cls.of(model, labels)
        except ConfigurationError:
            await model.unload()  # refused after its load: release what it holds
            raise
        if settings.model_warmup:
            try:
                await warm_up(loaded)
            except BaseException:
                await loaded.release()
                raise
        return loaded

    @classmethod
    def of(cls, model: Model, labels: custom_metrics.ModelLabels) -> LoadedModel:
        settings = model.settings
        if inspect.iscoroutinefunction(model.sequence_end):
            raise ConfigurationError(
                f"Model {model.name!r}: sequence_end must be a plain def (it only drops the "
                "sequence's state), not async def"
            )
        is_async = inspect.iscoroutinefunction(model.predict)
        threads = None
        if settings.threads_per_worker > 1 and not is_async:
            threads = concurrent.futures.ThreadPoolExecutor(
                settings.threads_per_worker, thread_name_prefix=f"inferd-{settings.name}"
            )
        inline = cast(InlinePredict, model) if hasattr(model, "predict_inline") else None
        return cls(model, is_async, threads, labels, inline=inline)

    @property
    def capacity(self) -> int:
        """How many requests this model may run at once here."""
        return self.model.settings.threads_per_worker

    def own_threads(self) -> concurrent.futures.ThreadPoolExecutor:
        """Where a plain call runs off the thread that reads requests: a plain
        generator (in a worker process, one thread per stream), an in-process plain
        predict not measured quick; the model's threads, or as many of its own (one,
        with ``threads_per_worker: 1``)."""
        if self.threads is not None:
            return self.threads
        if self.own_thread is None:
            settings = self.model.settings
            self.own_thread = concurrent.futures.ThreadPoolExecutor(
                settings.threads_per_worker, thread_name_prefix=f"inferd-{settings.name}-stream"
            )
        return self.own_thread

    def shut_threads(self, *, cancel_futures: bool = False) -> None:
        """Stop its threads (those running finish their call)."""
        for threads in (self.threads, self.own_thread):
            if threads is not None:
                threads.shutdown(wait=False, cancel_futures=cancel_futures)

    def instance(self) -> LoadedInstance:
        """What the server needs to know of this runtime: metadata, and how it answers."""
        model = self.model
        streams = model.streams
        return LoadedInstance(
            model.metadata(),
            predicts=model.predicts,
            streams=streams,
            interleaved_streams=streams and self.interleaved_streams,
            wants_headers=bool(getattr(model, "wants_headers", False)),
            custom_routes=tuple(getattr(model, "custom_routes", ())),
            openai_endpoints=tuple(getattr(model, "openai_endpoints", ())),
            openai_adapters=tuple(getattr(model, "openai_adapters", ())),
        )

    @property
    def interleaved_streams(self) -> bool:
        """Whether ``predict_stream`` is an async generator (its streams run interleaved
        on an event loop); else each stream needs a thread (a slot) for its life."""
        return inspect.isasyncgenfunction(self.model.predict_stream)

    def open_stream(
        self, request: InferenceRequest
    ) -> Iterator[InferenceResponse] | AsyncIterator[InferenceResponse]:
        """Call ``predict_stream``: the generator it returns (nothing has run yet)."""
        model = self.model
        with InModel(self, request):
            responses = model.predict_stream(request)
        if not isinstance(responses, Iterator | AsyncIterator):
            raise _bad_return(
                model,
                f"predict_stream returned {type(responses).__name__}, not a generator "
                "(write it with yield)",
            )
        return responses

    def next_sync(self, responses: Iterator[InferenceResponse]) -> InferenceResponse:
        """The next response of a plain generator, run in the calling thread;
        StopIteration at its end."""
        with InModel(self):
            return checked_response(self.model, next(responses), "predict_stream")

    async def next_async(self, responses: AsyncIterator[InferenceResponse]) -> InferenceResponse:
        """The next response of an async generator; StopAsyncIteration at its end."""
        with InModel(self):
            return checked_response(self.model, await anext(responses), "predict_stream")

    def runs_inline(self, request: InferenceRequest) -> bool:
        """Whether this async model's ``predict`` can answer ``request`` with
        :meth:`call_sync`, on the calling thread (a worker: no hop to its loop)."""
        inline = self.inline
        return inline is not None and inline.predicts_inline(request)

    def call_sync(self, request: InferenceRequest) -> InferenceResponse:
        """Run a plain ``predict`` (or an async one that :meth:`runs_inline`) in the
        calling thread; its checked response, or an InferdError that says what went
        wrong."""
        model = self.model
        with InModel(self, request):
            if self.inline is not None and self.is_async:
                return checked_response(model, self.inline.predict_inline(request))
            return checked_response(model, model.predict(request))

    async def call_async(self, request: InferenceRequest) -> InferenceResponse:
        """Await an ``async def predict``; its checked response, or an InferdError."""
        model = self.model
        with InModel(self, request):
            response = await cast(Awaitable[InferenceResponse], model.predict(request))
            return checked_response(model, response)

    def end_sequence(self, sequence_id: int | str) -> None:
        """Call the runtime's ``sequence_end``, if it has one; what it raises is logged
        (the sequence is over all the same)."""
        model = self.model
        if not overrides(model, "sequence_end"):
            return
        token = custom_metrics.set_model(self.labels)
        try:
            model.sequence_end(sequence_id)
        except Exception:
            logger.exception(
                "Model %r: sequence_end(%r) raised; the sequence is over anyway",
                model.name,
                sequence_id,
            )
        finally:
            custom_metrics.reset_model(token)

    async def release(self) -> None:
        """Stop its threads and unload it; an unload that raises is logged, not raised."""
        self.shut_threads()
        try:
            await self.model.unload()
        except Exception:
            logger.exception("Unloading model %r raised; it is dropped anyway", self.model.name)


class InModel:
    """Around one call into the runtime's code: the custom metrics it logs carry its
    model's labels, the calls it makes to other models end with ``request``'s deadline
    (model_calls.py), and what it raises reaches the client as an InferdError (a
    generator's StopIteration / StopAsyncIteration pass: they end a stream)."""

    __slots__ = ("_deadline", "_loaded", "_serving", "_token")

    def __init__(self, loaded: LoadedModel, request: InferenceRequest | None = None) -> None:
        self._loaded = loaded
        self._deadline = request.deadline if request is not None else None
        self._serving: Token[float | None] | None = None

    def __enter__(self) -> None:
        self._token = custom_metrics.set_model(self._loaded.labels)
        if self._deadline is not None:
            self._serving = model_calls.serving(self._deadline)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: Any
    ) -> None:
        if self._serving is not None:
            model_calls.served(self._serving)
        custom_metrics.reset_model(self._token)
        passes = InferdError | StopIteration | StopAsyncIteration
        if isinstance(error, Exception) and not isinstance(error, passes):
            raise as_inferd_error(self._loaded.model, error) from error


def as_inferd_error(model: Model, error: Exception) -> InferdError:
    """What the client sees when ``predict`` raised: InferdErrors as they are, else a 500."""
    if isinstance(error, InferdError):
        return error
    logger.error("Model %r failed while predicting", model.name, exc_info=error)
    return ModelError(f"Model {model.name!r} failed: {describe(error)}")


def checked_response(model: Model, response: object, method: str = "predict") -> InferenceResponse:
    """What ``predict`` returned (or ``predict_stream`` yielded), if the wire layers
    can send it; else a ModelError that says what is wrong (in every pool alike, not
    a bare 500 from the codec)."""
    if not isinstance(response, InferenceResponse):
        verb = "yielded" if method == "predict_stream" else "returned"
        raise _bad_return(
            model, f"{method} {verb} {type(response).__name__}, not an InferenceResponse"
        )
    for tensor in response.outputs:
        data = getattr(tensor, "data", None)
        if not isinstance(tensor, Tensor) or not isinstance(data, np.ndarray):
            got = type(data if isinstance(tensor, Tensor) else tensor).__name__
            raise _bad_return(
                model, f"each output must be a Tensor holding a numpy array, got {got}"
            )
        try:
            datatype_of(data.dtype)
        except ValueError as error:
            raise _bad_return(model, f"output {tensor.name!r}: {error}") from None
    return response


def _bad_return(model: Model, problem: str) -> ModelError:
    message = f"Model {model.name!r}: {problem}"
    logger.error("%s", message)  # a bug in the runtime: its author needs to see it
    return ModelError(message)
