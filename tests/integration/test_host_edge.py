"""The model host's edge (host/edge.py): a real in-process DataPlane served on
a unix socket, reached with the worker IPC's own client, ``workers/channel.py``."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.errors import InvalidRequest, ModelNotFound
from inferd.host.edge import close_host, serve_host
from inferd.server.app import InferenceServer
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers import ipc, messages
from inferd.workers.base import LoadedInstance
from inferd.workers.channel import Channel
from tests.support.models import write_model_folder
from tests.support.polling import wait_for_async

from .conftest import RUNTIMES, StartServer
from .host_runtimes import Held
from .runtimes import Tokens

pytestmark = pytest.mark.anyio

HOST_RUNTIMES = "tests.integration.host_runtimes"
# Instance ids the client binds (a protocol process's own ids).
ECHO, HELD, REFUSES, HEADERS, TOKENS = range(1, 6)


def write_models(repository: Path) -> Path:
    write_model_folder(repository, "echo", f"{RUNTIMES}.Echo")
    write_model_folder(repository, "tokens", f"{RUNTIMES}.Tokens")
    write_model_folder(repository, "held", f"{HOST_RUNTIMES}.Held", threads_per_worker=16)
    write_model_folder(repository, "refuses", f"{HOST_RUNTIMES}.Refuses")
    write_model_folder(repository, "headers", f"{HOST_RUNTIMES}.Headers")
    return repository


@pytest.fixture
async def host(start_inferd: StartServer) -> AsyncIterator[InferenceServer]:
    Held.reset()
    server = await start_inferd()
    yield server
    for gate in Held.gates.values():
        gate.set()  # let held requests end before their models unload


@pytest.fixture
async def connect(host: InferenceServer, tmp_path: Path) -> AsyncIterator[Callable[[], Any]]:
    """Connects a Channel to the host's edge, served on ``tmp_path/host.sock``."""
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(tmp_path / "host.sock"))
    server = await serve_host(host.dataplane, listening)
    channels: list[Channel] = []

    async def open_channel() -> Channel:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(tmp_path / "host.sock"))
        channel = await Channel.open(sock, lambda: "the host is gone", lambda: None)
        channels.append(channel)
        return channel

    yield open_channel
    for channel in channels:
        channel.close()
    close_host(server)
    await server.wait_closed()


@pytest.fixture
async def channel(connect: Callable[[], Any]) -> Channel:
    channel: Channel = await connect()
    for instance_id, name in [
        (ECHO, "echo"),
        (HELD, "held"),
        (REFUSES, "refuses"),
        (HEADERS, "headers"),
        (TOKENS, "tokens"),
    ]:
        await channel.call(messages.BindHosted(name, None), instance_id)
    return channel


def request(request_id: str = "q", **parameters: Any) -> ipc.PackedRequest:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    return ipc.pack_request(InferenceRequest([Tensor("x", data)], request_id, parameters))


def predict(channel: Channel, instance_id: int, packed: ipc.PackedRequest) -> Any:
    return channel.start_call(messages.Predict(packed), instance_id, ipc.unpack_response)


async def test_load_answers_the_loaded_instance(connect: Callable[[], Any]) -> None:
    channel: Channel = await connect()
    loaded = await channel.call(messages.BindHosted("tokens", None), 7)
    assert isinstance(loaded, LoadedInstance)
    assert loaded.metadata.name == "tokens" and loaded.streams
    with pytest.raises(ModelNotFound, match="'nope'"):
        await channel.call(messages.BindHosted("nope", None), 8)
    with pytest.raises(ModelNotFound, match="no BindHosted bound it"):
        await predict(channel, 8, request())
    assert await channel.call(messages.Unload(), 7) is None
    with pytest.raises(ModelNotFound, match="no BindHosted bound it"):
        await predict(channel, 7, request())


async def test_load_waits_for_the_start_up_models(
    host: InferenceServer, connect: Callable[[], Any]
) -> None:
    channel: Channel = await connect()
    host.dataplane.started = False
    loading = channel.start_call(messages.BindHosted("echo", None), 1)
    await asyncio.sleep(0.2)  # the host polls every 50 ms: it would have answered
    assert not loading.done()
    host.dataplane.started = True
    assert (await asyncio.wait_for(loading, 5)).metadata.name == "echo"


async def test_predict_round_trip(channel: Channel) -> None:
    answer: InferenceResponse = await predict(channel, ECHO, request())
    (output,) = answer.outputs
    assert output.data.dtype == np.float32
    assert np.array_equal(output.data, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert (answer.model_name, answer.id) == ("echo", "q")


async def test_predict_timed_answers_what_the_host_recorded(channel: Channel) -> None:
    packed, record = await channel.call(messages.PredictTraced(request()), ECHO)
    rows, requests, worker, started, ended, waited = record
    # The host's batch (two rows, one request), run in its own process (no worker).
    assert (rows, requests, worker) == (2, 1, None)
    assert 0 < started <= ended and waited >= 0
    assert ipc.unpack_response(packed).outputs[0].data.shape == (2, 3)


async def test_concurrent_calls_are_answered_as_they_finish(channel: Channel) -> None:
    ids = [f"r{i}" for i in range(8)]
    calls = {request_id: predict(channel, HELD, request(request_id)) for request_id in ids}
    await wait_for_async(lambda: Held.running == set(ids), "every request to run at once")
    for request_id in reversed(ids):  # the last sent is answered first
        Held.release(request_id)
        answer = await asyncio.wait_for(calls[request_id], 5)
        assert answer.id == request_id
        assert not any(calls[other].done() for other in ids if other < request_id)


async def test_model_errors_keep_their_class(channel: Channel) -> None:
    with pytest.raises(InvalidRequest, match="refuses every request"):
        await predict(channel, REFUSES, request())
    # The connection reads on.
    assert (await predict(channel, ECHO, request("after"))).id == "after"


async def test_headers_in_and_response_headers_out(channel: Channel) -> None:
    # As the protocol process passes them to a runtime that wants them.
    answer = await predict(channel, HEADERS, request(headers={"x-in": "hello"}))
    assert answer.parameters["headers"] == {"x-out": "HELLO"}


class Unknown(messages.Command):
    KIND = 99

    def fields(self) -> tuple[Any, ...]:
        return ()


class HalfBind(messages.Command):
    """BindHosted's kind with one field only."""

    KIND = messages.BindHosted.KIND

    def fields(self) -> tuple[Any, ...]:
        return ("not a pair",)


async def test_unknown_commands_are_refused_and_the_connection_reads_on(
    channel: Channel,
) -> None:
    with pytest.raises(Exception, match="unknown command 99"):
        await channel.call(Unknown(), ECHO)
    with pytest.raises(Exception, match="bad command BindHosted"):
        await channel.call(HalfBind(), 9)
    worker_only = messages.LoadInWorker(ModelSettings(name="echo", implementation="x.Y"), None)
    with pytest.raises(Exception, match="does not take LoadInWorker"):
        await channel.call(worker_only, 9)
    assert await channel.call(messages.ApplyControl(object()), 0) is None  # type: ignore[arg-type]
    assert (await predict(channel, ECHO, request("after"))).id == "after"


async def test_a_stream_arrives_whole_and_in_order(channel: Channel) -> None:
    stream_request = ipc.unpack_request(request("s", count=200))
    stream = channel.open_stream(TOKENS, stream_request, window=8)
    indexes = [int(response.outputs[1].data[0]) async for response in stream]
    assert indexes == list(range(200))
    await asyncio.wait_for(stream.finished, 5)


async def test_a_stream_sends_no_further_than_its_credit(channel: Channel) -> None:
    stream_request = ipc.unpack_request(request("w", count=100))
    stream = channel.open_stream(TOKENS, stream_request, window=8)
    # Nobody reads: the host sends the window's worth, then waits for credit. A list
    # of responses ready together goes whole: the last may overshoot the window by
    # up to the in-process stream's read-ahead (16) less one.
    await wait_for_async(lambda: len(stream._responses) >= 8, "the window's responses")
    sent = len(stream._responses)
    await asyncio.sleep(0.1)  # time it would have taken to send more
    assert len(stream._responses) == sent <= 8 + 15
    indexes = [int(response.outputs[1].data[0]) async for response in stream]
    assert indexes == list(range(100))


async def test_cancel_stops_the_generator(channel: Channel) -> None:
    Tokens.reset()
    stream_request = ipc.unpack_request(request("c", count=10_000, delay=0.01))
    stream = channel.open_stream(TOKENS, stream_request, window=8)
    await anext(stream)
    stream.cancel()
    await asyncio.wait_for(stream.finished, 5)  # ENDED came back
    assert Tokens.stopped == ["c"]  # the generator's finally ran before it


async def test_closing_the_connection_cancels_its_calls(channel: Channel) -> None:
    call = predict(channel, HELD, request("gone"))
    await wait_for_async(lambda: "gone" in Held.running, "the request to run")
    channel.close()
    await wait_for_async(lambda: Held.cancelled == ["gone"], "the host to cancel it")
    with pytest.raises(Exception):  # noqa: B017 - WorkerLost, from the channel itself
        await call


async def test_a_stream_that_fails_ends_with_its_error(channel: Channel) -> None:
    stream_request = ipc.unpack_request(request("f", count=10, fail_at=3))
    stream = channel.open_stream(TOKENS, stream_request, window=8)
    with pytest.raises(Exception, match="the stream broke at 3"):
        async for _ in stream:
            pass


async def test_a_frame_that_cannot_be_read_closes_its_connection(
    host: InferenceServer, tmp_path: Path, connect: Callable[[], Any]
) -> None:
    await connect()  # the host serves tmp_path/host.sock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(tmp_path / "host.sock"))
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, ipc.PREFIX.pack(4, 0) + b"junk")
    assert await asyncio.wait_for(loop.sock_recv(sock, 16), 5) == b""
    sock.close()
