"""The drain at the DataPlane: refusing new calls, then stopping those still running."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from inferd.errors import ShuttingDown
from inferd.server.app import InferenceServer
from inferd.serving.drain import REFUSED, STOPPED
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from tests.support.models import write_model_folder
from tests.support.polling import wait_for_async

from .conftest import RUNTIMES, StartServer
from .conftest import write_models as write_integration_models
from .runtimes import Gated, Tokens

pytestmark = pytest.mark.anyio


def write_models(repository: Path) -> Path:
    """The integration tests' models plus `tokens`, a model that streams."""
    write_model_folder(write_integration_models(repository), "tokens", f"{RUNTIMES}.Tokens")
    return repository


def x_request(value: float) -> InferenceRequest:
    return InferenceRequest(inputs=[Tensor("x", np.array([value], dtype=np.float32))])


def tokens_request(request_id: str, count: int, delay: float) -> InferenceRequest:
    parameters = {"count": count, "delay": delay}
    return InferenceRequest(inputs=[Tensor("t", np.ones(1))], id=request_id, parameters=parameters)


async def test_a_closed_drain_refuses_new_calls_and_lets_those_admitted_finish(
    start_inferd: StartServer,
) -> None:
    inferd = await start_inferd()
    dataplane = inferd.dataplane
    running = asyncio.create_task(dataplane.infer("gated", None, x_request(1.0)))
    await wait_for_async(lambda: Gated.running == 1, "the first call to run")
    queued = asyncio.create_task(dataplane.infer("gated", None, x_request(2.0)))
    await wait_for_async(lambda: waiting_in(inferd, "gated") == 1, "the second call to queue")
    assert dataplane.ready() and dataplane.model_ready("gated")

    dataplane.drain.close()

    assert not dataplane.ready() and not dataplane.model_ready("gated")
    for call in (
        dataplane.infer("echo", None, x_request(3.0)),
        anext(dataplane.infer_stream("tokens", None, tokens_request("late", 1, 0))),
    ):
        with pytest.raises(ShuttingDown, match=re.escape(REFUSED)):
            await call
    assert (dataplane.drain.calls, dataplane.drain.streams) == (2, 0)
    Gated.gate.set()
    answers = await asyncio.gather(running, queued)
    assert [float(a.outputs[0].data[0]) for a in answers] == [2.0, 4.0]
    assert (dataplane.drain.calls, dataplane.drain.streams) == (0, 0)


async def test_the_cut_fails_running_and_queued_calls_with_shutting_down(
    inferd: InferenceServer,
) -> None:
    dataplane = inferd.dataplane
    running = asyncio.create_task(dataplane.infer("gated", None, x_request(1.0)))
    await wait_for_async(lambda: Gated.running == 1, "the first call to run")
    queued = asyncio.create_task(dataplane.infer("gated", None, x_request(2.0)))
    await wait_for_async(lambda: waiting_in(inferd, "gated") == 1, "the second call to queue")

    assert dataplane.drain.cut() == (2, 0)

    for call in (running, queued):
        with pytest.raises(ShuttingDown, match="stopped this request before it finished"):
            await call
        assert call.cancelling() == 0  # the cut's cancellation became the error
    assert waiting_in(inferd, "gated") == 0 and Gated.ran == []
    (stats,) = dataplane.statistics("gated")
    assert stats.fail_count == 2
    with pytest.raises(ShuttingDown, match=re.escape(REFUSED)):
        await dataplane.infer("echo", None, x_request(3.0))


async def test_the_cut_stops_a_stream_waiting_for_its_next_response(
    inferd: InferenceServer,
) -> None:
    dataplane = inferd.dataplane
    responses = dataplane.infer_stream("tokens", None, tokens_request("slow", 5, 60))
    (first,) = await anext(responses)  # the next token is 60 ms away: it comes alone
    assert first.outputs[0].data.tolist() == [b"tok0"]
    waiting = asyncio.ensure_future(anext(responses))
    await wait_for_async(lambda: streams_waiting(inferd) == 1, "the stream to wait")

    assert dataplane.drain.cut() == (0, 1)

    with pytest.raises(ShuttingDown, match=re.escape(STOPPED)):
        await waiting
    await wait_for_async(
        lambda: Tokens.stopped == ["slow"], "the generator to stop"
    )  # the model's generator stopped too
    assert dataplane.drain.streams == 0


async def test_the_cut_fails_a_stream_whose_reader_holds_a_response_on_its_next_read(
    inferd: InferenceServer,
) -> None:
    dataplane = inferd.dataplane
    responses = dataplane.infer_stream("tokens", None, tokens_request("held", 5, 0))
    ready: list[InferenceResponse] = await anext(responses)  # the reader is busy with them
    first = ready[0]

    assert dataplane.drain.cut() == (0, 1)

    assert first.outputs[0].data.tolist() == [b"tok0"]
    with pytest.raises(ShuttingDown, match=re.escape(STOPPED)):
        await anext(responses)
    await wait_for_async(lambda: Tokens.stopped == ["held"], "the generator to stop")


async def test_a_cancellation_that_is_not_the_cut_stays_a_cancellation(
    inferd: InferenceServer,
) -> None:
    dataplane = inferd.dataplane
    call = asyncio.create_task(dataplane.infer("gated", None, x_request(1.0)))
    await wait_for_async(lambda: Gated.running == 1, "the first call to run")
    call.cancel()  # a client that left
    with pytest.raises(asyncio.CancelledError):
        await call
    assert dataplane.drain.calls == 0 and dataplane.ready()


def waiting_in(server: InferenceServer, name: str) -> int:
    scheduler = server.registry.get_ready(name).scheduler
    assert scheduler is not None
    return scheduler.waiting


def streams_waiting(server: InferenceServer) -> int:
    return sum(stream.waiting for stream in server.dataplane.drain._streams)
