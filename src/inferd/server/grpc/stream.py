"""``ModelStreamInfer``: many requests on one call, as Triton's decoupled mode.

Each request read from the stream runs through ``DataPlane.infer_stream``, and
each response is sent as soon as the model yields it, in the order it yields
them, carrying the request's id. Up to :data:`STREAM_WINDOW` requests of one
stream are open at once (of any models), their responses interleaving; a model
that does not stream answers once per request, and those answers go back in the
order their requests came (as before streaming existed), whatever streams run
beside them.

A request with the bool parameter ``triton_enable_empty_final_response`` (what
tritonclient's ``async_stream_infer(..., enable_empty_final_response=True)``
sends) gets ``triton_final_response`` = false on each of its responses, then an
empty response (no outputs; model name, version and id set) with
``triton_final_response`` = true, after an error too. A request that fails is
answered with ``error_message`` (and its id), and the stream goes on.

A call the client cancels stops every generator of its open requests. When the
server shuts down, the stream answers the requests it has read, then ends with
UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import grpc

from inferd.protocol import pb
from inferd.server.errors import grpc_error
from inferd.server.grpc.health import ShutdownSignal
from inferd.server.grpc.registration import MalformedMessage

logger = logging.getLogger(__name__)

SHUTTING_DOWN = (
    "The server is shutting down; requests sent on this stream after the last answer "
    "were not run, send them again (to another replica)"
)
# Requests of one stream open at once: enough to keep a worker busy and let the
# scheduler batch, few enough to bound the memory a single stream can hold.
STREAM_WINDOW = 16
# Lists of answers made but not yet sent, per stream (each list: the answers of one
# request that were ready together, at most its stream's window: 16 in process, 64
# from a worker): a client that reads slowly pauses the models' generators instead
# of making the server buffer without bound.
ANSWERS_AHEAD = 16
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"

# What a stream yields: a request, or what grpc_registration made of an unparsable one.
StreamRequest = pb.ModelInferRequest | MalformedMessage
Answers = list[pb.ModelStreamInferResponse]
# Runs one request: its answers as soon as the model yields them, in lists of those
# ready together; raises what ModelInfer would answer with.
RunRequest = Callable[[pb.ModelInferRequest], AsyncGenerator[Answers, None]]
# Whether a request goes to a model that streams (else its answer keeps its place).
Streams = Callable[[pb.ModelInferRequest], bool]


async def answer_stream(
    requests: AsyncIterator[StreamRequest],
    context: grpc.aio.ServicerContext,
    run: RunRequest,
    streams: Streams,
    shutdown: ShutdownSignal,
) -> AsyncGenerator[Answers, None]:
    """The answers to ``requests`` as soon as they are made, in lists of those made
    together (send them one by one, in order)."""
    if shutdown.is_set:
        await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
    session = _Session(run, streams)
    reader = asyncio.create_task(session.read(requests))
    shutdown.stream_readers.add(reader)
    try:
        while (answers := await session.next_answers()) is not None:
            yield answers
            session.sent()
        if reader.cancelled():
            await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
        reader.result()  # re-raises if reading the stream failed
    finally:
        shutdown.stream_readers.discard(reader)
        reader.cancel()
        session.cancel()  # a call that ended early: stop every model still answering


class _Session:
    """One call's open requests and the answers they made that are not sent yet."""

    def __init__(self, run: RunRequest, streams: Streams) -> None:
        self._run = run
        self._streams = streams
        # None marks the end: nothing is reading or running any more.
        self._answers: asyncio.Queue[Answers | None] = asyncio.Queue()
        self._room = asyncio.Semaphore(ANSWERS_AHEAD)
        self._window = asyncio.Semaphore(STREAM_WINDOW)
        self._running: set[asyncio.Task[None]] = set()
        self._open = 1  # the reader, and each running request
        # Done once the last request to a model that does not stream has queued its answer.
        self._last_in_order: asyncio.Future[None] | None = None

    async def read(self, requests: AsyncIterator[StreamRequest]) -> None:
        """Start each request as it is read, up to STREAM_WINDOW open at once."""
        try:
            while True:
                # Take a slot before reading, so cancelling here never drops a request.
                await self._window.acquire()
                try:
                    request = await anext(requests)
                except StopAsyncIteration:
                    return
                self._start(request)
        finally:
            self._one_less()

    async def next_answers(self) -> Answers | None:
        return await self._answers.get()

    def sent(self) -> None:
        self._room.release()

    def cancel(self) -> None:
        for task in self._running:
            task.cancel()

    def _start(self, request: StreamRequest) -> None:
        if isinstance(request, pb.ModelInferRequest) and self._streams(request):
            task = asyncio.create_task(self._answer_as_made(request))
        else:
            previous = self._last_in_order
            mine = self._last_in_order = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._answer_in_order(request, previous))
            task.add_done_callback(lambda _: _set_done(mine))
        self._open += 1
        self._running.add(task)
        task.add_done_callback(self._request_done)

    async def _answer_as_made(self, request: StreamRequest) -> None:
        async with contextlib.aclosing(_answers_of(request, self._run)) as answers:
            async for ready in answers:
                await self._queue(ready)

    async def _answer_in_order(
        self, request: StreamRequest, previous: asyncio.Future[None] | None
    ) -> None:
        async with contextlib.aclosing(_answers_of(request, self._run)) as answers:
            made = [answer async for ready in answers for answer in ready]
        if previous is not None:
            await previous
        await self._queue(made)

    async def _queue(self, answers: Answers) -> None:
        await self._room.acquire()
        self._answers.put_nowait(answers)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._window.release()
        if not task.cancelled() and task.exception() is not None:
            logger.error("A gRPC stream request failed", exc_info=task.exception())
        self._one_less()

    def _one_less(self) -> None:
        self._open -= 1
        if self._open == 0:
            self._answers.put_nowait(None)


async def _answers_of(request: StreamRequest, run: RunRequest) -> AsyncGenerator[Answers, None]:
    """Every answer to one request, in lists: its responses or its error, then the
    empty final response when the request asked for one."""
    if isinstance(request, MalformedMessage):
        yield [pb.ModelStreamInferResponse(error_message=request.error().message)]
        return
    final = _wants_empty_final_response(request)
    version = request.model_version
    failure = None
    try:
        async with contextlib.aclosing(run(request)) as responses:
            async for answers in responses:
                version = answers[-1].infer_response.model_version
                if final:
                    for answer in answers:
                        answer.infer_response.parameters[FINAL_RESPONSE].bool_param = False
                yield answers
    except Exception as error:
        _, failure, _ = grpc_error(error, "a gRPC stream request")
    last = []
    if failure is not None:
        # The id lets the client tell which request of the stream failed.
        identity = _identity(request, version)
        if final:
            identity.parameters[FINAL_RESPONSE].bool_param = False
        last.append(pb.ModelStreamInferResponse(error_message=failure, infer_response=identity))
    if final:
        empty = _identity(request, version)
        empty.parameters[FINAL_RESPONSE].bool_param = True
        last.append(pb.ModelStreamInferResponse(infer_response=empty))
    if last:
        yield last


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _wants_empty_final_response(request: pb.ModelInferRequest) -> bool:
    """Whether the request asks for the final flag; the parameter is the protocol's,
    so it is taken out before the model sees the request."""
    parameters = request.parameters
    if EMPTY_FINAL_RESPONSE not in parameters:
        return False
    wanted = bool(parameters[EMPTY_FINAL_RESPONSE].bool_param)
    del parameters[EMPTY_FINAL_RESPONSE]
    return wanted


def _identity(request: pb.ModelInferRequest, version: str) -> pb.ModelInferResponse:
    return pb.ModelInferResponse(
        model_name=request.model_name, model_version=version, id=request.id
    )
