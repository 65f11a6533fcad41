"""ThreadStream: a plain generator's predict_stream run in process by a thread of the
model's own, each response handed to the loop as made, read ahead up to a bound."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar

import numpy as np
import pytest

from inferd import custom_metrics
from inferd.errors import ModelError
from inferd.model import Model
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.thread_stream import ThreadStream
from tests.support.polling import wait_for_async

pytestmark = pytest.mark.anyio

TAG: ContextVar[str] = ContextVar("tag", default="")


class Counting(Model):
    """Yields 0..n-1 (a ValueError instead of ``fail_at``); records where it ran."""

    def __init__(self, settings: ModelSettings) -> None:
        super().__init__(settings)
        self.yielded = 0
        self.threads: set[str] = set()
        self.tags: set[str] = set()
        self.cleaned_up_in = ""
        self.gate: threading.Event | None = None  # when set, each step waits on it

    def predict_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        try:
            for value in range(int(request.inputs[0].data[0])):
                self.threads.add(threading.current_thread().name)
                self.tags.add(TAG.get())
                if self.gate is not None:
                    self.gate.wait(5)
                if value == request.parameters.get("fail_at"):
                    raise ValueError(f"no {value}")
                self.yielded += 1
                yield InferenceResponse([Tensor("y", np.array([value]))])
        finally:
            self.cleaned_up_in = threading.current_thread().name


class AsyncFromPlainDef(Model):
    def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        async def responses() -> AsyncIterator[InferenceResponse]:
            yield InferenceResponse([Tensor("y", np.array([1]))])

        return responses()


@pytest.fixture
def threads() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="own") as executor:
        yield executor


def loaded(model: Model) -> LoadedModel:
    return LoadedModel.of(model, custom_metrics.model_labels(model.name, model.version))


def request(count: int, **parameters: object) -> InferenceRequest:
    return InferenceRequest([Tensor("n", np.array([count]))], parameters=dict(parameters))


async def values(stream: ThreadStream) -> list[int]:
    return [int(response.outputs[0].data[0]) async for response in stream]


async def test_the_generator_runs_in_the_thread_with_the_callers_context(
    threads: concurrent.futures.ThreadPoolExecutor,
) -> None:
    model = Counting(ModelSettings(name="m"))
    TAG.set("caller")
    stream = ThreadStream(loaded(model), request(3), threads)
    assert await values(stream) == [0, 1, 2]
    await asyncio.wait_for(stream.finished, 5)
    assert {name[:3] for name in model.threads} == {"own"} and model.tags == {"caller"}
    assert model.cleaned_up_in.startswith("own"), "closed in its thread"


async def test_each_response_reaches_the_reader_as_it_is_made(
    threads: concurrent.futures.ThreadPoolExecutor,
) -> None:
    model = Counting(ModelSettings(name="m"))
    model.gate = threading.Event()
    stream = ThreadStream(loaded(model), request(3), threads)
    await asyncio.sleep(0.05)
    assert model.yielded == 0
    model.gate.set()
    assert [int(r.outputs[0].data[0]) for r in await stream.take()][:1] == [0]


async def test_the_generator_runs_at_most_read_ahead_responses_ahead_of_the_reader(
    threads: concurrent.futures.ThreadPoolExecutor,
) -> None:
    model = Counting(ModelSettings(name="m"))
    stream = ThreadStream(loaded(model), request(100), threads, read_ahead=4)
    await anext(stream)
    await wait_for_async(lambda: model.yielded >= 5, "read ahead", timeout=5)
    await asyncio.sleep(0.05)  # room for a step too many, if it were allowed
    assert model.yielded == 5, "the one taken, and four ahead"
    taken = await stream.take()
    assert len(taken) == 4
    await wait_for_async(lambda: model.yielded == 9, "four more ahead", timeout=5)
    stream.cancel()
    await asyncio.wait_for(stream.finished, 5)
    assert model.cleaned_up_in.startswith("own") and model.yielded == 9


async def test_cancel_during_a_step_closes_the_generator_once_the_step_returns(
    threads: concurrent.futures.ThreadPoolExecutor,
) -> None:
    model = Counting(ModelSettings(name="m"))
    model.gate = threading.Event()
    stream = ThreadStream(loaded(model), request(100), threads)
    await wait_for_async(lambda: bool(model.threads), "inside the generator", timeout=5)
    stream.cancel()
    await asyncio.sleep(0.02)
    assert not stream.finished.done(), "its thread is still inside the generator"
    model.gate.set()
    await asyncio.wait_for(stream.finished, 5)
    assert model.cleaned_up_in.startswith("own") and model.yielded == 1
    with pytest.raises(StopAsyncIteration):
        await anext(stream)  # what it made after the cancel was dropped


async def test_the_models_error_is_raised_once_after_its_responses(
    threads: concurrent.futures.ThreadPoolExecutor,
) -> None:
    stream = ThreadStream(loaded(Counting(ModelSettings(name="m"))), request(5, fail_at=3), threads)
    got = [int((await anext(stream)).outputs[0].data[0]) for _ in range(3)]
    with pytest.raises(ModelError, match=r"Model 'm' failed: ValueError: no 3"):
        await anext(stream)
    assert got == [0, 1, 2]
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_a_plain_def_returning_an_async_iterator_is_refused_clearly(
    threads: concurrent.futures.ThreadPoolExecutor,
) -> None:
    with pytest.raises(ModelError, match="write it as async def with yield"):
        ThreadStream(loaded(AsyncFromPlainDef(ModelSettings(name="m"))), request(1), threads)


async def test_a_model_whose_threads_are_shut_is_not_ready(
    threads: concurrent.futures.ThreadPoolExecutor,
) -> None:
    threads.shutdown()
    with pytest.raises(Exception, match="no longer loaded"):
        ThreadStream(loaded(Counting(ModelSettings(name="m"))), request(1), threads)


def test_a_generator_paused_for_its_reader_stops_once_the_loop_closes() -> None:
    """Nobody will read it: the process is exiting, and waits for its threads."""
    model = Counting(ModelSettings(name="m"))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="own") as threads:

        async def start() -> ThreadStream:
            stream = ThreadStream(loaded(model), request(100), threads, read_ahead=2)
            await wait_for_async(lambda: model.yielded == 2, "paused for its reader", timeout=5)
            return stream

        asyncio.run(start())
    # The executor's shutdown waited for the thread: it noticed the loop closed.
    assert model.cleaned_up_in.startswith("own") and model.yielded == 2
