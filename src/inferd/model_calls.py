"""A runtime calling another model of its server (Triton's BLS, ensembles, pipelines).

The server registers the one entry its protocol edges use (the dataplane) with
:func:`serve_calls`; a runtime calls ``await self.context.infer(name, request)``
(or :func:`infer` here) and its request goes through the called model's queue,
batcher and statistics as a client's would, without a network hop. Code running
in a thread of its own (a synchronous Triton ``execute``) calls
:func:`infer_from_thread`, which runs the call on the server's event loop.

The caller's deadline and cancellation go along. The request a model serves
carries when its ``timeout`` runs out (``InferenceRequest.deadline``, set by the
dataplane that took it, :func:`note_deadline`); while its model runs, a call it
makes gets what is left as its own ``timeout`` (or keeps a shorter one of its
own), and one made once it has run out fails at once with DeadlineExceeded. A
call is a task of the caller's (or, from a thread, a future :class:`ThreadCalls`
cancels with the request): a caller cancelled because its client left cancels its
calls, and the called model's request with them.

Where it works: runtimes in the server's own process (``parallel_workers: 0``, in
every protocol process and in the model host) call its dataplane; runtimes in its
worker processes reach the same dataplane over a private socket
(``workers/calls_client.py``, ``server/worker_calls.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator
from contextvars import ContextVar, Token
from typing import Any, Protocol, TypeVar

from inferd.context import NO_CONTEXT, RequestContext
from inferd.errors import DeadlineExceeded, ModelError
from inferd.types import InferenceRequest, InferenceResponse


class ModelCaller(Protocol):
    """What runs a call: the server's dataplane has these two methods."""

    async def infer(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> InferenceResponse: ...

    def infer_stream(
        self, name: str, version: str | None, request: InferenceRequest, context: RequestContext
    ) -> AsyncIterator[list[InferenceResponse]]: ...


T = TypeVar("T")

_caller: ModelCaller | None = None
_loop: asyncio.AbstractEventLoop | None = None
# The deadline of the request the model running in this context serves (its
# InferenceRequest.deadline): set around each call into a runtime (workers/loaded_model.py).
_deadline: ContextVar[float | None] = ContextVar("inferd_call_deadline", default=None)


def note_deadline(request: InferenceRequest) -> None:
    """Set ``request.deadline`` from its ``timeout`` parameter (microseconds, as in
    Triton; 0: none), keeping an earlier one it carries (a caller's). A value that is
    not a number is left to the queue, which refuses it."""
    micros = request.parameters.get("timeout")
    if isinstance(micros, bool) or not isinstance(micros, int | float) or not micros > 0:
        return
    end = time.monotonic() + micros / 1e6
    request.deadline = end if request.deadline is None else min(request.deadline, end)


def serving(deadline: float | None) -> Token[float | None]:
    """Around a runtime's work for a request: the calls it makes end with ``deadline``;
    :func:`served` with the token when it returns."""
    return _deadline.set(deadline)


def served(token: Token[float | None]) -> None:
    _deadline.reset(token)


def _bounded(request: InferenceRequest) -> InferenceRequest:
    """``request`` bounded by the deadline of the request its caller serves: what is
    left of it becomes its ``timeout`` (unless its own is shorter) and its deadline;
    DeadlineExceeded when nothing is left."""
    deadline = _deadline.get()
    if deadline is None:
        return request
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded(
            "The request this model is serving ran past its timeout before this call "
            f"to another model was made (by {-left:.3f}s); the call was not run"
        )
    micros = max(1, int(left * 1e6))
    own = request.parameters.get("timeout")
    if not isinstance(own, int | float) or isinstance(own, bool) or not 0 < own < micros:
        request.parameters = {**request.parameters, "timeout": micros}
    request.deadline = deadline if request.deadline is None else min(request.deadline, deadline)
    return request


def serve_calls(caller: ModelCaller | None, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Let this process's runtimes call models through ``caller`` (None: stop), whose
    event loop is ``loop`` (default: the running one)."""
    global _caller, _loop
    _caller = caller
    _loop = loop if loop is not None or caller is None else asyncio.get_running_loop()


def _the_caller() -> ModelCaller:
    if _caller is None:
        raise ModelError(
            "This process cannot call models: it is not a server's process, nor one of "
            "its worker processes (a runtime loaded outside `inferd start`?)"
        )
    return _caller


async def infer(
    name: str,
    request: InferenceRequest,
    version: str | None = None,
    context: RequestContext = NO_CONTEXT,
) -> InferenceResponse:
    """Run ``request`` on model ``name`` (its ready ``version``, default the latest)
    through its scheduler; raises what a client would get (ModelNotFound, ...)."""
    return await _the_caller().infer(name, version, _bounded(request), context)


async def infer_stream(
    name: str,
    request: InferenceRequest,
    version: str | None = None,
    context: RequestContext = NO_CONTEXT,
) -> AsyncGenerator[InferenceResponse, None]:
    """The responses of a streaming (decoupled) model, one by one; a model that only
    predicts gives its one response."""
    responses = _the_caller().infer_stream(name, version, _bounded(request), context)
    try:
        async for ready in responses:
            for response in ready:
                yield response
    finally:
        closing = getattr(responses, "aclose", None)
        if closing is not None:
            await closing()


class ThreadCalls:
    """The calls code running in a thread makes (:meth:`run`), cancelled together when
    the request that thread serves is (its client left): each blocked call then
    raises ``concurrent.futures.CancelledError`` and the called model's queue drops it."""

    def __init__(self) -> None:
        self._open: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()
        self._cancelled = False
        self._deadline = _deadline.get()  # the request's, made where it is served

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        token = _thread_calls.set(self)
        deadline = _deadline.set(self._deadline)
        try:
            return function(*args)
        finally:
            _deadline.reset(deadline)
            _thread_calls.reset(token)

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            calls = list(self._open)
        for call in calls:
            call.cancel()

    def _started(self, call: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            if self._cancelled:
                call.cancel()
                return
            self._open.add(call)
        call.add_done_callback(self._ended)

    def _ended(self, call: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._open.discard(call)


_thread_calls: ContextVar[ThreadCalls | None] = ContextVar("inferd_thread_calls", default=None)


def _on_loop(coroutine: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> T:
    """Run ``coroutine`` on ``loop`` from another thread and wait for it (a call this
    thread's ThreadCalls may cancel)."""
    call = asyncio.run_coroutine_threadsafe(coroutine, loop)
    calls = _thread_calls.get()
    if calls is not None:
        calls._started(call)
    return call.result()


def infer_from_thread(
    name: str, request: InferenceRequest, version: str | None = None
) -> InferenceResponse:
    """:func:`infer` from a thread that is not the server's event loop (it blocks)."""
    return _on_loop(infer(name, request, version), _thread_loop())


def infer_stream_from_thread(
    name: str, request: InferenceRequest, version: str | None = None
) -> Iterator[InferenceResponse]:
    """:func:`infer_stream` from another thread: each response as it arrives."""
    loop = _thread_loop()
    responses = infer_stream(name, request, version)
    try:
        while True:
            done, response = _on_loop(_next(responses), loop)
            if done:
                return
            assert response is not None
            yield response
    finally:
        asyncio.run_coroutine_threadsafe(responses.aclose(), loop).result()


async def _next(
    responses: AsyncIterator[InferenceResponse],
) -> tuple[bool, InferenceResponse | None]:
    try:
        return False, await anext(responses)
    except StopAsyncIteration:
        return True, None


def _thread_loop() -> asyncio.AbstractEventLoop:
    _the_caller()
    assert _loop is not None
    if _loop.is_closed():
        raise ModelError("The server is stopping: models can no longer be called")
    if _on_the_loop(_loop):
        raise ModelError(
            "A blocking call to another model from the server's event loop would wait "
            "forever: from an async def, await the async form (async_exec, context.infer)"
        )
    return _loop


def _on_the_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return threading.current_thread() is threading.main_thread() and not loop.is_running()
