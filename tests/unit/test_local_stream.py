"""LocalStream: an async generator's predict_stream run on the loop, read ahead of its
reader up to a bound. (A plain generator's: test_thread_stream.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest

from inferd import custom_metrics
from inferd.errors import InvalidRequest, ModelError
from inferd.model import Model
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.local_stream import READ_AHEAD, LocalStream

pytestmark = pytest.mark.anyio


def answer(value: int) -> InferenceResponse:
    return InferenceResponse([Tensor("y", np.array([value]))])


class Counting(Model):
    """Yields 0..n-1 from an async generator; records how far it ran and its finally."""

    def __init__(self, settings: ModelSettings) -> None:
        super().__init__(settings)
        self.yielded = 0
        self.cleaned_up = asyncio.Event()

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        try:
            for value in range(int(request.inputs[0].data[0])):
                await asyncio.sleep(0)
                self.yielded += 1
                yield answer(value)
        finally:
            self.cleaned_up.set()


class AsyncCounting(Model):
    def __init__(self, settings: ModelSettings) -> None:
        super().__init__(settings)
        self.cleaned_up = asyncio.Event()

    async def predict_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        try:
            for value in range(int(request.inputs[0].data[0])):
                await asyncio.sleep(0)
                if value == 3 and request.parameters.get("fail"):
                    raise ValueError("no fourth")
                yield answer(value)
        finally:
            self.cleaned_up.set()


class NotAGenerator(Model):
    def predict_stream(self, request: InferenceRequest) -> list[InferenceResponse]:  # type: ignore[override]
        return [answer(1)]


def loaded(model: Model) -> LoadedModel:
    return LoadedModel.of(model, custom_metrics.model_labels(model.name, model.version))


def request(count: int, **parameters: object) -> InferenceRequest:
    return InferenceRequest([Tensor("n", np.array([count]))], parameters=dict(parameters))


async def values(stream: LocalStream) -> list[int]:
    return [int(response.outputs[0].data[0]) async for response in stream]


async def test_the_generator_runs_at_most_read_ahead_responses_ahead_of_the_reader() -> None:
    model = Counting(ModelSettings(name="m"))
    stream = LocalStream(loaded(model), request(100))
    assert model.yielded == 0, "calling predict_stream runs nothing yet"
    await anext(stream)
    await anext(stream)
    for _ in range(50):  # let it run as far as it may
        await asyncio.sleep(0)
    assert model.yielded == 2 + READ_AHEAD
    stream.cancel()
    await asyncio.wait_for(stream.finished, 1)
    assert model.cleaned_up.is_set() and model.yielded == 2 + READ_AHEAD


async def test_take_waits_for_one_response_then_takes_every_ready_one_in_order() -> None:
    model = Counting(ModelSettings(name="m"))
    stream = LocalStream(loaded(model), request(40), read_ahead=8)
    first = await stream.take()
    assert [int(r.outputs[0].data[0]) for r in first] == list(range(len(first)))
    taken = [int(r.outputs[0].data[0]) for r in first]
    while True:
        try:
            ready = await stream.take()
        except StopAsyncIteration:
            break
        assert 1 <= len(ready) <= 8
        taken += [int(r.outputs[0].data[0]) for r in ready]
    assert taken == list(range(40))
    assert stream.finished.done() and model.cleaned_up.is_set()


async def test_an_async_generator_runs_on_the_loop_and_its_error_ends_the_stream() -> None:
    model = AsyncCounting(ModelSettings(name="m"))
    stream = LocalStream(loaded(model), request(5, fail=True))
    got = [int((await anext(stream)).outputs[0].data[0]) for _ in range(3)]
    with pytest.raises(ModelError, match=r"Model 'm' failed: ValueError: no fourth"):
        await anext(stream)
    assert got == [0, 1, 2]
    await asyncio.wait_for(stream.finished, 1)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_cancelling_an_async_generator_runs_its_finally() -> None:
    model = AsyncCounting(ModelSettings(name="m"))
    stream = LocalStream(loaded(model), request(100))
    await anext(stream)
    stream.cancel()
    await asyncio.wait_for(stream.finished, 1)
    assert model.cleaned_up.is_set()


async def test_a_plain_generator_is_not_stepped_here() -> None:
    class Plain(Model):
        def predict_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
            yield answer(0)

    with pytest.raises(TypeError, match="async generators only"):
        LocalStream(loaded(Plain(ModelSettings(name="m"))), request(1))


async def test_predict_stream_that_is_not_a_generator_is_refused_clearly() -> None:
    with pytest.raises(ModelError, match="predict_stream returned list, not a generator"):
        LocalStream(loaded(NotAGenerator(ModelSettings(name="m"))), request(1))


async def test_an_inferd_error_from_the_model_keeps_its_kind() -> None:
    class Strict(Model):
        async def predict_stream(
            self, request: InferenceRequest
        ) -> AsyncIterator[InferenceResponse]:
            raise InvalidRequest("needs a prompt")
            yield answer(0)

    stream = LocalStream(loaded(Strict(ModelSettings(name="m"))), request(1))
    with pytest.raises(InvalidRequest, match="needs a prompt"):
        await anext(stream)
