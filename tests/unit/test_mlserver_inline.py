"""inferd.compat.inline: which async predicts run without an event loop, and running them."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import numpy as np
import pytest

from inferd.compat.inline import never_suspends, run_to_end
from inferd.compat.mlmodel_runtime import runtime_class_for
from inferd.compat.mlserver import MLModel, types
from inferd.compat.mlserver.codecs import NumpyCodec
from inferd.custom_calls import HANDLER
from inferd.custom_metrics import model_labels
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, Tensor
from inferd.workers.loaded_model import LoadedModel


class Runtime:
    async def plain(self, rows: list[int]) -> list[int]:
        doubled = [row * 2 for row in rows]
        return sorted(row for row in doubled)

    async def awaits(self, rows: list[int]) -> list[int]:
        await asyncio.sleep(0)
        return rows

    async def loops_async(self, rows: Any) -> list[int]:
        return [row async for row in rows]

    async def enters_async(self, lock: asyncio.Lock) -> None:
        async with lock:
            pass

    async def asks_for_the_loop(self, rows: list[int]) -> list[int]:
        asyncio.get_running_loop()
        return rows

    async def schedules_in_a_lambda(self, rows: list[int]) -> Any:
        return lambda: asyncio.ensure_future(self.plain(rows))

    def synchronous(self, rows: list[int]) -> list[int]:
        return rows


@pytest.mark.parametrize("method", ["plain"])
def test_a_predict_that_never_awaits_runs_inline(method: str) -> None:
    assert never_suspends(getattr(Runtime(), method))
    assert never_suspends(getattr(Runtime, method))  # the function, unbound


@pytest.mark.parametrize(
    "method",
    ["awaits", "loops_async", "enters_async", "asks_for_the_loop", "schedules_in_a_lambda"],
)
def test_one_that_may_suspend_or_uses_the_loop_does_not(method: str) -> None:
    assert not never_suspends(getattr(Runtime(), method))


def test_only_coroutine_functions_qualify() -> None:
    assert not never_suspends(Runtime().synchronous)
    assert not never_suspends(len)
    assert not never_suspends(contextlib.suppress)


def test_run_to_end_returns_what_it_returned_and_raises_what_it_raised() -> None:
    assert run_to_end(Runtime().plain([3, 1])) == [2, 6]

    async def fails() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        run_to_end(fails())


def test_run_to_end_refuses_a_coroutine_that_suspends() -> None:
    with pytest.raises(RuntimeError, match="suspended"):
        run_to_end(Runtime().awaits([1]))


class Doubles(MLModel):
    async def predict(self, payload: types.InferenceRequest) -> types.InferenceResponse:
        doubled = NumpyCodec.decode_input(payload.inputs[0]) * 2
        return types.InferenceResponse(
            model_name=self.name, outputs=[NumpyCodec.encode_output("doubled", doubled)]
        )


class DoublesLater(MLModel):
    async def predict(self, payload: types.InferenceRequest) -> types.InferenceResponse:
        await asyncio.sleep(0)
        return await Doubles.predict(self, payload)  # type: ignore[arg-type]


def _loaded(mlmodel: type[MLModel]) -> LoadedModel:
    runtime = runtime_class_for(mlmodel, MLModel)(ModelSettings(name="doubles"))
    asyncio.run(runtime.load())
    return LoadedModel.of(runtime, model_labels("doubles", None))


def _request(**parameters: Any) -> InferenceRequest:
    return InferenceRequest([Tensor("x", np.array([1, 2], np.int32))], parameters=parameters)


def test_a_worker_answers_an_mlmodel_that_never_awaits_on_its_own_thread() -> None:
    loaded = _loaded(Doubles)
    assert loaded.is_async and loaded.runs_inline(_request())
    response = loaded.call_sync(_request())
    assert response.outputs[0].data.tolist() == [[2], [4]]
    assert response.model_name == "doubles"


def test_one_that_awaits_and_custom_handler_calls_go_to_the_loop() -> None:
    assert not _loaded(DoublesLater).runs_inline(_request())
    assert not _loaded(Doubles).runs_inline(_request(**{HANDLER: "ping"}))
