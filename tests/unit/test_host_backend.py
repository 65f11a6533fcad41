"""The model host's backend (host/backend.py) over a fake client: a hosted
version is bound, answered, traced, drained and unbound, and nothing of this
process's dispatch runs on its way."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import numpy as np
import pytest

from inferd.context import RequestContext
from inferd.errors import ModelNotReady
from inferd.host.backend import HostBackend
from inferd.host.client import HostClient
from inferd.observability.stats import ModelStatsTable
from inferd.observability.trace_record import BatchRun, RequestTrace
from inferd.serving.backends import BackendChoice
from inferd.serving.registry import Registry
from inferd.settings import ModelSettings
from inferd.settings.loader import model_settings_from_dict
from inferd.types import InferenceRequest, InferenceResponse, ModelMetadata, Tensor
from inferd.workers.base import LoadedInstance

from .test_registry import FakePool

pytestmark = pytest.mark.anyio


class FakeStream:
    def __init__(self, lists: list[list[InferenceResponse]]) -> None:
        self._lists = lists
        self.cancelled = False

    async def take(self) -> list[InferenceResponse]:
        if not self._lists:
            raise StopAsyncIteration
        return self._lists.pop(0)

    def cancel(self) -> None:
        self.cancelled = True


class FakeClient:
    """The host's socket: binds, and answers each call with what it was sent."""

    def __init__(self) -> None:
        self.bound: dict[int, tuple[str, str | None]] = {}
        self.unbound: list[int] = []
        self.sent: list[tuple[int, InferenceRequest, BatchRun | None, Any]] = []
        self.gate: asyncio.Event | None = None  # set: calls wait for it
        self.streams: list[FakeStream] = []
        self.closed = False

    async def bind(self, instance_id: int, name: str, version: str | None) -> LoadedInstance:
        self.bound[instance_id] = (name, version)
        return LoadedInstance(ModelMetadata(name=name, platform="host"), instances=2)

    async def unbind(self, instance_id: int) -> None:
        self.bound.pop(instance_id, None)
        self.unbound.append(instance_id)

    async def infer(
        self,
        instance_id: int,
        request: InferenceRequest,
        run: BatchRun | None = None,
        disconnected: Any = None,
    ) -> InferenceResponse:
        self.sent.append((instance_id, request, run, disconnected))
        if self.gate is not None:
            await self.gate.wait()
        if run is not None:
            run.predicted(3, 10, 20)  # what the host's record says
        return InferenceResponse([Tensor("echo", request.inputs[0].data)])

    def stream(self, instance_id: int, request: InferenceRequest) -> FakeStream:
        row = [InferenceResponse([Tensor("echo", request.inputs[0].data)])]
        stream = FakeStream([row, row + row])
        self.streams.append(stream)
        return stream

    async def close(self) -> None:
        self.closed = True


def batched(name: str) -> ModelSettings:
    return model_settings_from_dict(
        {"name": name, "implementation": "fake.Runtime", "max_batch_size": 8}, None
    )


def request() -> InferenceRequest:
    return InferenceRequest([Tensor("x", np.arange(3, dtype=np.float32))])


@pytest.fixture
def client() -> FakeClient:
    return FakeClient()


@pytest.fixture
def backend(client: FakeClient) -> HostBackend:
    return HostBackend(cast(HostClient, client))


async def test_a_load_binds_the_hosts_version_and_counts_nothing_here(
    client: FakeClient, backend: HostBackend
) -> None:
    opened = await backend.load(7, batched("m"))
    assert client.bound == {7: ("m", None)}
    assert opened.scheduler is None and opened.cache is None  # nothing queues it here
    assert backend.instances(7, batched("m")) == 2  # as the host counts its workers
    await backend.unload(7)
    assert client.unbound == [7] and backend.instances(7, batched("m")) == 0
    await backend.close()
    assert client.closed


async def test_a_call_goes_to_the_host_as_it_came(client: FakeClient, backend: HostBackend) -> None:
    calls = (await backend.load(1, batched("m"))).calls

    async def gone() -> None:
        await asyncio.Event().wait()

    sent = request()
    response = await calls.submit(sent, RequestContext(disconnected=gone))
    assert np.array_equal(response.outputs[0].data, sent.inputs[0].data)
    # The request itself, unbatched and untraced, with the client's disconnect to watch.
    assert client.sent == [(1, sent, None, gone)]


async def test_a_traced_call_carries_the_hosts_record(
    client: FakeClient, backend: HostBackend
) -> None:
    calls = (await backend.load(1, batched("m"))).calls
    trace = RequestTrace(span=None)
    await calls.submit(request(), RequestContext(trace=trace))
    assert trace.batch is not None and (trace.batch.rows, trace.batch.requests) == (3, 1)
    assert trace.batch.worker == 3 and trace.batch.predict_ended_ns == 20
    assert 0 < trace.queued_ns == trace.dispatched_ns <= trace.ended_ns


async def test_unloading_refuses_new_calls_and_waits_for_those_running(
    client: FakeClient, backend: HostBackend
) -> None:
    calls = (await backend.load(1, batched("m"))).calls
    client.gate = asyncio.Event()
    running = asyncio.ensure_future(calls.submit(request(), RequestContext()))
    await asyncio.sleep(0)
    assert calls.busy
    closing = asyncio.ensure_future(calls.close())
    await asyncio.sleep(0.01)
    assert not closing.done()  # a call is still at the host
    with pytest.raises(ModelNotReady, match="being unloaded"):
        await calls.submit(request(), RequestContext())
    client.gate.set()
    await asyncio.wait_for(closing, 2)
    assert (await running).outputs and not calls.busy


async def test_a_stream_yields_the_hosts_lists_and_a_reader_that_leaves_stops_it(
    client: FakeClient, backend: HostBackend
) -> None:
    calls = (await backend.load(1, batched("m"))).calls
    lists = [len(ready) async for ready in calls.stream(request(), RequestContext())]
    assert lists == [1, 2] and client.streams[0].cancelled and not calls.busy
    stream = calls.stream(request(), RequestContext())
    await anext(stream)
    assert calls.busy
    await stream.aclose()  # the client left: the host's generator is stopped
    assert client.streams[1].cancelled and not calls.busy


async def test_the_registry_serves_a_hosted_version_through_this_backend(
    client: FakeClient, backend: HostBackend
) -> None:
    """A protocol process: a copied model is dispatched here, a hosted one goes to the
    host with no scheduler of its own, and its counts are the host's."""
    own, stats = FakePool(), ModelStatsTable()
    choice = BackendChoice(here=lambda s: s.max_batch_size <= 1, elsewhere=backend)
    registry = Registry(own, stats, choice=choice)
    await registry.load("m", [batched("m")])
    found = registry.get_ready("m")
    assert own.loaded == {} and list(client.bound.values()) == [("m", None)]
    assert found.scheduler is None and registry.instances(found) == 2
    assert found.calls is not None
    await found.calls.submit(request(), RequestContext())
    assert len(client.sent) == 1 and list(stats) == []
    await registry.unload("m")
    assert client.bound == {} and len(client.unbound) == 1
