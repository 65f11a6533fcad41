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


async def loaded_pool(folder: Path, runtime: type[Model], threads: int = 1) -> InProcessPool:
    pool = InProcessPool()
    settings = {
        "name": "probe",
        "implementation": f"{__name__}.{runtime.__name__}",
        "threads_per_worker": threads,
        "parameters": {"version": "v1"},
    }
    await pool.load(1, model_settings_from_dict(settings, folder / "model-settings.json"))
    return pool


async def infer(pool: InProcessPool, do: str = "echo") -> InferenceResponse:
    TAG.set(f"caller-{do}")
    request = InferenceRequest([Tensor("x", np.zeros(1))], parameters={"do": do})
    return await pool.predict(Call(1, request)).result()


async def test_a_plain_predict_runs_right_on_the_event_loop_with_its_metrics_labelled(
    folder: Path, records: list[Any]
) -> None:
    pool = await loaded_pool(folder, SyncProbe)
    await infer(pool)
    assert [(threading.current_thread().name, "caller-echo")] == SEEN
    assert records == [("probe_calls", ("probe", "v1"), 1.0)]
    await pool.close()


async def test_a_slow_plain_predict_moves_off_the_event_loop_and_back_when_quick(
    folder: Path, records: list[Any]
) -> None:
    """A call that takes long on the loop stalls every connection of the process (and
    its health probes): once its calls average over SLOW_CALL_SECONDS the model runs in
    a thread of its own, and back on the loop once they are quick again."""
    pool = await loaded_pool(folder, SyncProbe)
    loop_thread = threading.current_thread().name
    await infer(pool, "slow")  # on the loop: its time is not known yet
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticking = asyncio.create_task(tick())
    await asyncio.sleep(0)
    before = ticks
    await infer(pool, "slow")  # off the loop: the loop ran meanwhile
    ticking.cancel()
    assert ticks - before > 3
    for _ in range(30):
        await infer(pool)
    threads = [thread for thread, _ in SEEN]
    assert threads[0] == loop_thread and threads[1].startswith("inferd-probe")
    assert threads[-1] == loop_thread, "quick again: back on the loop"
    assert {tag for _, tag in SEEN[1:2]} == {"caller-slow"}, "the context went along"
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
