"""The in-process pool: where a model's predict runs, and what one call does
(metrics labels, response check, error mapping: LoadedModel, shared with workers)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd import custom_metrics
from inferd.errors import ConfigurationError, InvalidRequest, ModelError
from inferd.model import Model
from inferd.settings.loader import model_settings_from_dict
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers.base import Call
from inferd.workers.inprocess import InProcessPool

pytestmark = pytest.mark.anyio

TAG: ContextVar[str] = ContextVar("tag", default="")
SEEN: list[tuple[str, str]] = []  # (thread name, TAG) for each predict
TOGETHER = threading.Barrier(2)


def answer(request: InferenceRequest) -> Any:
    what = request.parameters.get("do", "echo")
    if what == "raise":
        raise ValueError("boom")
    if what == "refuse":
        raise InvalidRequest("no such input")
    if what == "text":
        return "text"
    if what == "list":
        return InferenceResponse([Tensor("y", [1, 2])])  # type: ignore[arg-type]
    if what == "together":
        TOGETHER.wait(5)
    if what == "slow":
        time.sleep(0.03)
    SEEN.append((threading.current_thread().name, TAG.get()))
    custom_metrics.log(probe_calls=1)
    return InferenceResponse([Tensor("y", np.ones(1))])


class SyncProbe(Model):
    def predict(self, request: InferenceRequest) -> Any:
        return answer(request)


class PlainStream(Model):
    """A plain generator that sleeps between yields, as a model that computes would."""

    def predict_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        for value in range(3):
            time.sleep(0.03)
            SEEN.append((threading.current_thread().name, TAG.get()))
            yield InferenceResponse([Tensor("y", np.array([value]))])


class AsyncProbe(Model):
    async def predict(self, request: InferenceRequest) -> Any:  # type: ignore[override]
        await asyncio.sleep(0)
        return answer(request)


@pytest.fixture
def records() -> Iterator[list[tuple[str, tuple[str, ...], float]]]:
    logged: list[tuple[str, tuple[str, ...], float]] = []
    SEEN.clear()
    custom_metrics.set_sink(lambda definitions, values: logged.extend(values))
    yield logged
    custom_metrics.set_sink(None)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The model's folder: empty, so its runtime is imported from this module."""
    return tmp_path


async def loaded_pool(
    folder: Path, runtime: type[Model], threads: int = 1, **more: Any
) -> InProcessPool:
    pool = InProcessPool()
    settings = {
        "name": "probe",
        "implementation": f"{__name__}.{runtime.__name__}",
        "threads_per_worker": threads,
        "parameters": {"version": "v1"},
        **more,
    }
    await pool.load(1, model_settings_from_dict(settings, folder / "model-settings.json"))
    return pool


async def infer(pool: InProcessPool, do: str = "echo") -> InferenceResponse:
    TAG.set(f"caller-{do}")
    request = InferenceRequest([Tensor("x", np.zeros(1))], parameters={"do": do})
    return await pool.predict(Call(1, request)).result()


async def test_a_plain_predict_measured_quick_runs_right_on_the_event_loop_metrics_labelled(
    folder: Path, records: list[Any]
) -> None:
    """Its first call's cost is not known: it runs in a thread; once measured quick, on
    the loop (a thread hop would cost a light model more than its predict)."""
    pool = await loaded_pool(folder, SyncProbe)
    await infer(pool)
    await infer(pool)
    first, second = SEEN
    assert first[0].startswith("inferd-probe") and first[1] == "caller-echo"
    assert second == (threading.current_thread().name, "caller-echo")
    assert records == [("probe_calls", ("probe", "v1"), 1.0)] * 2
    await pool.close()


async def test_a_slow_plain_predict_never_holds_the_loop_and_comes_back_once_quick(
    folder: Path, records: list[Any]
) -> None:
    """A call that takes long on the loop stalls every connection of the process (and
    its health probes): neither its first call (its cost unknown) nor those while its
    calls average over SLOW_CALL_SECONDS run there; once they are quick again, it is
    back on the loop."""
    pool = await loaded_pool(folder, SyncProbe)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticking = asyncio.create_task(tick())
    await asyncio.sleep(0)
    for _ in range(2):
        before = ticks
        await infer(pool, "slow")  # off the loop: the loop ran meanwhile
        assert ticks - before > 3
    ticking.cancel()
    for _ in range(30):
        await infer(pool)
    threads = [thread for thread, _ in SEEN]
    assert all(thread.startswith("inferd-probe") for thread in threads[:3])
    assert threads[-1] == threading.current_thread().name, "quick again: back on the loop"
    assert {tag for _, tag in SEEN[:2]} == {"caller-slow"}, "the context went along"
    await pool.close()


async def test_a_plain_generator_steps_in_a_thread_handing_each_response_as_made(
    folder: Path, records: list[Any]
) -> None:
    """Its sleeps between yields would hold the loop (every connection of the process,
    its health probes); in its own thread the loop runs on, and each response reaches
    the reader as it is made, not all at the end."""
    pool = await loaded_pool(folder, PlainStream)
    TAG.set("caller-stream")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticking = asyncio.create_task(tick())
    stream = pool.stream(Call(1, InferenceRequest([Tensor("x", np.zeros(1))])))
    arrivals = []
    async for response in stream:
        arrivals.append((int(response.outputs[0].data[0]), ticks))
    ticking.cancel()
    assert [value for value, _ in arrivals] == [0, 1, 2]
    assert arrivals[0][1] < arrivals[1][1] < arrivals[2][1], "the loop ran between them"
    assert all(thread.startswith("inferd-probe") for thread, _ in SEEN)
    assert {tag for _, tag in SEEN} == {"caller-stream"}, "the context went along"
    await pool.close()


@pytest.mark.parametrize("runtime", [SyncProbe, PlainStream])
async def test_warmup_runs_plain_code_off_the_loop(
    folder: Path, records: list[Any], runtime: type[Model]
) -> None:
    """A model loaded while the process serves (the repository API) must not hold the
    loop with its warmup requests either."""
    inputs = {"x": {"data_type": "TYPE_FP32", "dims": [1], "zero_data": True}}
    warmup = [{"name": "zeros", "count": 2, "inputs": inputs}]
    pool = await loaded_pool(folder, runtime, model_warmup=warmup)
    assert SEEN and all(thread != threading.current_thread().name for thread, _ in SEEN)
    await pool.close()


async def test_with_threads_a_plain_predict_runs_in_its_own_threads_with_the_callers_context(
    folder: Path, records: list[Any]
) -> None:
    pool = await loaded_pool(folder, SyncProbe, threads=2)
    assert pool.capacity(1) == 2
    await asyncio.wait_for(asyncio.gather(infer(pool, "together"), infer(pool, "together")), 10)
    assert [thread.startswith("inferd-probe") for thread, _ in SEEN] == [True, True]
    assert {tag for _, tag in SEEN} == {"caller-together"}, "the context went along"
    assert records == [("probe_calls", ("probe", "v1"), 1.0)] * 2
    await pool.close()


async def test_an_async_predict_is_awaited_with_its_metrics_labelled(
    folder: Path, records: list[Any]
) -> None:
    pool = await loaded_pool(folder, AsyncProbe, threads=2)
    await infer(pool)
    assert [(threading.current_thread().name, "caller-echo")] == SEEN
    assert records == [("probe_calls", ("probe", "v1"), 1.0)]
    await pool.close()


@pytest.mark.parametrize(("runtime", "threads"), [(SyncProbe, 1), (SyncProbe, 2), (AsyncProbe, 1)])
@pytest.mark.parametrize(
    ("do", "error", "message"),
    [
        ("raise", ModelError, "Model 'probe' failed: ValueError: boom"),
        ("refuse", InvalidRequest, "no such input"),
        ("text", ModelError, "Model 'probe': predict returned str, not an InferenceResponse"),
        (
            "list",
            ModelError,
            "Model 'probe': each output must be a Tensor holding a numpy array, got list",
        ),
    ],
)
async def test_what_predict_gets_wrong_reaches_the_client_as_a_clear_error(
    folder: Path,
    runtime: type[Model],
    threads: int,
    do: str,
    error: type[Exception],
    message: str,
) -> None:
    pool = await loaded_pool(folder, runtime, threads)
    with pytest.raises(error) as raised:
        await infer(pool, do)
    assert type(raised.value) is error and str(raised.value) == message
    await pool.close()


async def test_an_inference_timeout_is_refused_as_a_call_here_cannot_be_stopped(
    folder: Path,
) -> None:
    pool = InProcessPool()
    body = {"name": "timed", "implementation": f"{__name__}.SyncProbe", "inference_timeout": 3}
    settings = model_settings_from_dict(body, folder / "model-settings.json")
    with pytest.raises(ConfigurationError) as raised:
        await pool.load(1, settings)
    assert str(raised.value) == (
        f"{folder / 'model-settings.json'}: model 'timed' sets inference_timeout (3s), which "
        "needs worker processes: with parallel_workers: 0 the model runs in the server's own "
        "process, where a call that runs too long cannot be stopped. Set parallel_workers to 1 "
        "or more, or remove inference_timeout (from model-settings.json, or the "
        "INFERD_MODEL_INFERENCE_TIMEOUT environment variable)."
    )
    assert pool.capacity(1) == 0, "nothing loaded"
