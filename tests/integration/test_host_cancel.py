"""The model host's edge (host/edge.py) when a protocol process's client
leaves: ``Channel.cancel_call`` sends ``CANCEL`` of a forwarded call, which takes it
out of the host's queue unrun; and what a traced call (``PREDICT_TIMED``) answers
(workers/messages.py ``HostRun``), the host's own record of it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from inferd.host import client as host_client
from inferd.host.edge import close_host, serve_host
from inferd.observability.trace_record import BatchRun
from inferd.server.app import InferenceServer
from inferd.types import InferenceRequest, Tensor
from inferd.workers import ipc, messages
from inferd.workers.channel import Channel
from tests.support.models import write_model_folder
from tests.support.polling import wait_for_async

from .conftest import RUNTIMES, StartServer
from .host_runtimes import Held

pytestmark = pytest.mark.anyio

ONE, ECHO = 1, 2  # the instance ids the client binds


def write_models(repository: Path) -> Path:
    # One slot: a held request keeps the next one in the queue.
    one = {"threads_per_worker": 1, "max_queue_size": 4}
    write_model_folder(repository, "one", "tests.integration.host_runtimes.Held", **one)
    write_model_folder(repository, "echo", f"{RUNTIMES}.Echo", cache_enabled=True)
    return repository


@pytest.fixture
async def host(start_inferd: StartServer) -> AsyncIterator[InferenceServer]:
    Held.reset()
    server = await start_inferd(cache_enabled=True)
    yield server
    for gate in Held.gates.values():
        gate.set()  # let held requests end before their models unload


@pytest.fixture
async def channel(host: InferenceServer, tmp_path: Path) -> AsyncIterator[Channel]:
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(tmp_path / "host.sock"))
    server = await serve_host(host.dataplane, listening)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(tmp_path / "host.sock"))
    channel = await Channel.open(sock, lambda: "the host is gone", lambda: None)
    await channel.call(messages.BindHosted("one", None), ONE)
    await channel.call(messages.BindHosted("echo", None), ECHO)
    yield channel
    channel.close()
    close_host(server)
    await server.wait_closed()


def request(request_id: str) -> ipc.PackedRequest:
    data = np.arange(3, dtype=np.float32)
    return ipc.pack_request(InferenceRequest([Tensor("x", data)], request_id))


def waiting(host: InferenceServer) -> int:
    scheduler = host.dataplane.registry.get_ready("one", None).scheduler
    assert scheduler is not None
    return scheduler.waiting


async def test_a_cancelled_call_leaves_the_hosts_queue_unrun(
    host: InferenceServer, channel: Channel
) -> None:
    first = channel.start_call(messages.Predict(request("first")), ONE, ipc.unpack_response)
    await wait_for_async(lambda: Held.running == {"first"}, "the first request to run")
    queued = channel.start_call(messages.Predict(request("queued")), ONE, ipc.unpack_response)
    await wait_for_async(lambda: waiting(host) == 1, "the second request to queue")
    channel.cancel_call(queued)
    await wait_for_async(lambda: waiting(host) == 0, "the cancelled request to leave")
    Held.release("first")
    assert (await asyncio.wait_for(first, 5)).id == "first"
    last = channel.start_call(messages.Predict(request("last")), ONE, ipc.unpack_response)
    await wait_for_async(lambda: Held.running == {"last"}, "the next request to run")
    Held.release("last")
    assert (await asyncio.wait_for(last, 5)).id == "last"
    assert not queued.done(), "a cancelled call is not answered"
    assert "queued" not in Held.gates, "it never ran"


async def test_a_cancel_in_the_same_read_as_its_call_is_not_lost(
    host: InferenceServer, channel: Channel
) -> None:
    first = channel.start_call(messages.Predict(request("first")), ONE, ipc.unpack_response)
    await wait_for_async(lambda: Held.running == {"first"}, "the first request to run")
    queued = channel.start_call(messages.Predict(request("queued")), ONE, ipc.unpack_response)
    channel.cancel_call(queued)  # written right behind it: the host reads both at once
    last = channel.start_call(messages.Predict(request("last")), ONE, ipc.unpack_response)
    await wait_for_async(lambda: waiting(host) == 1, "the last request to queue")
    Held.release("first")
    await asyncio.wait_for(first, 5)
    # One slot, first come first served: the cancelled request would run before it.
    await wait_for_async(lambda: Held.running == {"last"}, "the last request to run")
    Held.release("last")
    assert (await asyncio.wait_for(last, 5)).id == "last"
    assert "queued" not in Held.gates, "it never ran"
    assert not queued.done(), "a cancelled call is not answered"


async def test_a_timed_call_answers_the_hosts_record_and_a_cached_one_none(
    channel: Channel,
) -> None:
    ran = BatchRun(rows=3, requests=1)
    timed = await channel.call(messages.PredictTraced(request("a")), ECHO)
    host_client._unpack_timed(ran, timed)
    assert (ran.rows, ran.requests, ran.worker, ran.ran) == (3, 1, None, True)
    assert 0 < ran.predict_started_ns <= ran.predict_ended_ns and ran.waited_ns >= 0
    cached = BatchRun(rows=3, requests=1)
    host_client._unpack_timed(
        cached, await channel.call(messages.PredictTraced(request("b")), ECHO)
    )
    assert not cached.ran, "answered from the host's cache: no model work to show"
