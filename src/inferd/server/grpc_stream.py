"""``ModelStreamInfer``: many requests on one call, answered in order.

Up to :data:`STREAM_WINDOW` requests of one stream run at once (so the scheduler
can batch them) and their answers go back in the order the requests came. A
request that fails is answered with ``error_message`` (and its id) and the stream
goes on. When the server shuts down, the stream answers what it has read, then
ends with UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ..protocol import pb
from .errors import grpc_error
from .grpc_health import ShutdownSignal
from .grpc_registration import MalformedMessage

SHUTTING_DOWN = (
    "The server is shutting down; requests sent on this stream after the last answer "
    "were not run, send them again (to another replica)"
)
# Requests of one stream running at once: enough to keep a worker busy and let
# the scheduler batch, few enough to bound the memory a single stream can hold.
STREAM_WINDOW = 16

# What a stream yields: a request, or what grpc_registration made of an unparsable one.
StreamRequest = pb.ModelInferRequest | MalformedMessage
# Runs one request as ModelInfer would; raises what ModelInfer would answer with.
InferOne = Callable[[pb.ModelInferRequest], Awaitable[pb.ModelInferResponse]]
Answers = asyncio.Queue[asyncio.Future[pb.ModelStreamInferResponse] | None]


async def answer_stream(
    requests: AsyncIterator[StreamRequest],
    context: Any,
    infer: InferOne,
    shutdown: ShutdownSignal,
) -> AsyncGenerator[pb.ModelStreamInferResponse, None]:
    """The answers to ``requests``, in order, each run by ``infer``."""
    if shutdown.is_set:
        await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
    answers: Answers = asyncio.Queue()
    window = asyncio.Semaphore(STREAM_WINDOW)
    reader = asyncio.create_task(_read_stream(requests, answers, window, infer))
    shutdown.stream_readers.add(reader)
    try:
        while (answer := await answers.get()) is not None:
            yield await answer
            window.release()
        await asyncio.wait([reader])
        if reader.cancelled():
            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        reader.result()  # re-raises if reading the stream failed
    finally:
        shutdown.stream_readers.discard(reader)
        reader.cancel()
        while not answers.empty():
            pending = answers.get_nowait()
            if pending is not None:
                pending.cancel()


async def _read_stream(
    requests: AsyncIterator[StreamRequest],
    answers: Answers,
    window: asyncio.Semaphore,
    infer: InferOne,
) -> None:
    """Start one task per request read; ``None`` in ``answers`` marks the end."""
    try:
        while True:
            # Take a slot before reading, so cancelling here never drops a request.
            await window.acquire()
            try:
                request = await anext(requests)
            except StopAsyncIteration:
                return
            answers.put_nowait(asyncio.ensure_future(_answer(request, infer)))
    finally:
        answers.put_nowait(None)


async def _answer(request: StreamRequest, infer: InferOne) -> pb.ModelStreamInferResponse:
    if isinstance(request, MalformedMessage):
        return pb.ModelStreamInferResponse(error_message=request.error().message)
    try:
        return pb.ModelStreamInferResponse(infer_response=await infer(request))
    except Exception as error:
        _, message, _ = grpc_error(error, "a gRPC stream request")
    # The id lets the client tell which request of the stream failed.
    identity = pb.ModelInferResponse(
        model_name=request.model_name, model_version=request.model_version, id=request.id
    )
    return pb.ModelStreamInferResponse(error_message=message, infer_response=identity)
