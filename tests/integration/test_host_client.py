"""A protocol process's client of the model host (host/client.py) against a
real host edge (host/edge.py) over a unix socket: binding, calls, and what
happens when the host goes away and comes back."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from inferd.errors import InferdError, ModelNotReady, WorkerLost
from inferd.host.client import HostClient
from inferd.host.edge import close_host, serve_host
from inferd.server.app import InferenceServer
from inferd.types import InferenceRequest, Tensor
from tests.support.polling import wait_for_async

from .conftest import StartServer

pytestmark = pytest.mark.anyio

ECHO = ("echo", None)
ROW = np.arange(4, dtype=np.float32)


@pytest.fixture
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="inferd-hosted-"))  # short: unix socket paths
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Host:
    """The host's edge for ``server``, served and stopped at will on one path."""

    def __init__(self, server: InferenceServer, path: Path) -> None:
        self.server, self.path = server, path
        self.serving: asyncio.Server | None = None

    async def serve(self) -> None:
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        self.serving = await serve_host(self.server.dataplane, sock)

    def stop(self) -> None:
        if self.serving is not None:
            close_host(self.serving)
            self.serving = None


@pytest.fixture
async def host(start_inferd: StartServer, folder: Path) -> AsyncIterator[Host]:
    served = Host(await start_inferd(), folder / "host.sock")
    yield served
    served.stop()


@pytest.fixture
async def pool(host: Host) -> AsyncIterator[HostClient]:
    made = HostClient(host.path, host_at_start=True)
    yield made
    await made.close()


async def echoed(pool: HostClient, instance_id: int = 1) -> np.ndarray:
    response = await pool.infer(instance_id, InferenceRequest([Tensor("x", ROW)]))
    return np.asarray(response.outputs[0].data)


async def test_a_bound_model_answers_through_the_host(host: Host, pool: HostClient) -> None:
    await host.serve()
    instance = await pool.bind(1, *ECHO)
    assert instance.metadata.name == "echo" and instance.instances == 1
    assert np.array_equal(await echoed(pool), ROW)
    stream = pool.stream(1, InferenceRequest([Tensor("x", ROW)]))
    assert len(await stream.take()) == 1  # Echo predicts only: its one answer
    await pool.unbind(1)
    with pytest.raises(InferdError, match="instance 1"):  # unbound: the host knows it not
        await echoed(pool)


async def test_a_load_waits_for_the_host_to_come(host: Host, pool: HostClient) -> None:
    loading = asyncio.ensure_future(pool.bind(1, *ECHO))
    await asyncio.sleep(0.2)  # the host is not there yet: the load keeps trying
    assert not loading.done()
    await host.serve()
    assert (await asyncio.wait_for(loading, 10)).metadata.name == "echo"


async def test_a_load_fails_at_once_when_no_host_ever_ran(host: Host) -> None:
    """Started later, a host is started by the coordinator before any load that needs
    it: a load that finds none (a process's start-up load of a folder added since)
    does not wait for one that is not coming."""
    pool = HostClient(host.path)  # no host starts with this process
    try:
        with pytest.raises(ModelNotReady, match="model host is not running"):
            await asyncio.wait_for(pool.bind(1, *ECHO), 2)
        await host.serve()  # once one has run, its socket stays: a restart is waited for
        host.stop()
        loading = asyncio.ensure_future(pool.bind(1, *ECHO))
        await asyncio.sleep(0.2)
        assert not loading.done()
        await host.serve()
        assert (await asyncio.wait_for(loading, 10)).metadata.name == "echo"
    finally:
        await pool.close()


async def test_losing_the_host_warns_unless_the_server_is_stopping(
    host: Host, pool: HostClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A host gone while serving is a failure (WARNING); in an orderly stop the host
    stops with the protocol processes, and its going is expected (DEBUG)."""
    lost = "Lost the connection to the model host"
    await host.serve()
    await pool.bind(1, *ECHO)
    with caplog.at_level(logging.DEBUG, "inferd.host.client"):
        host.stop()
        await wait_for_async(lambda: lost in caplog.text, "the loss logged")
        assert [r.levelname for r in caplog.records if lost in r.message] == ["WARNING"]
        caplog.clear()
        await host.serve()
        assert np.array_equal(await echoed(pool), ROW)  # connected again
        pool.server_stopping()
        host.stop()
        stopping = "closed its connection: the server is stopping"
        await wait_for_async(lambda: stopping in caplog.text, "the loss logged")
        assert [r.levelname for r in caplog.records if "model host" in r.message] == ["DEBUG"]


async def test_a_call_while_the_host_is_gone_waits_for_its_return_which_binds_again(
    host: Host, pool: HostClient
) -> None:
    await host.serve()
    await pool.bind(1, *ECHO)
    host.stop()
    await asyncio.sleep(0.05)  # the pool sees its connection close
    waiting = asyncio.ensure_future(echoed(pool))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # not ModelNotReady at once: the host is being restarted
    await host.serve()  # restarted: the call connects and binds instance 1 again
    assert np.array_equal(await asyncio.wait_for(waiting, 10), ROW)


async def test_calls_past_those_that_may_wait_for_the_host_fail_at_once(host: Host) -> None:
    pool = HostClient(host.path, host_at_start=True, most_waiting=1)
    try:
        await host.serve()
        await pool.bind(1, *ECHO)
        host.stop()
        await asyncio.sleep(0.05)
        waiting = asyncio.ensure_future(echoed(pool))
        await asyncio.sleep(0.05)
        with pytest.raises((ModelNotReady, WorkerLost)) as failed:
            await asyncio.wait_for(echoed(pool), 2)  # a second: beyond the bound
        assert isinstance(failed.value, InferdError) and failed.value.code.name == "UNAVAILABLE"
        await host.serve()
        assert np.array_equal(await asyncio.wait_for(waiting, 10), ROW)
    finally:
        await pool.close()


async def test_a_load_outlives_a_host_that_dies_while_it_binds(
    host: Host, pool: HostClient
) -> None:
    host.server.dataplane.started = False  # the host still loads: a LOAD waits
    await host.serve()
    loading = asyncio.ensure_future(pool.bind(1, *ECHO))
    await asyncio.sleep(0.2)
    host.stop()  # it dies meanwhile; started again, it has loaded
    host.server.dataplane.started = True
    await host.serve()
    assert (await asyncio.wait_for(loading, 10)).metadata.name == "echo"
    assert np.array_equal(await echoed(pool), ROW)
