"""EagerListener: every waiting connection is taken at once, on asyncio's loop and uvloop's."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import uvloop

from inferd.server.listener import EagerListener
from tests.support.polling import wait_for_async

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
CONNECTIONS = 20


class Counted(asyncio.Protocol):
    made: list[Counted]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(self)
        self.transport = transport


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Callable[[Awaitable[Any]], Any]:
    def run_on_loop(coroutine: Awaitable[Any]) -> Any:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as runner:
            return runner.run(coroutine)  # type: ignore[arg-type]

    return run_on_loop


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


def connect(stack: ExitStack, address: tuple[str, int], count: int) -> None:
    """``count`` clients, connected by the kernel, waiting to be accepted."""
    for _ in range(count):
        stack.enter_context(socket.create_connection(address, timeout=5))


def test_takes_every_waiting_connection_in_one_turn(
    run: Callable[[Awaitable[Any]], Any], listening: socket.socket
) -> None:
    made: list[Counted] = []
    protocol = type("Made", (Counted,), {"made": made})

    async def scenario() -> int:
        listener = EagerListener(listening, protocol, backlog=128)
        listener.close()  # the test calls the readiness callback itself, once
        with ExitStack() as clients:
            connect(clients, listening.getsockname(), CONNECTIONS)
            listener._accept_waiting()
            await wait_for_async(
                lambda: len(made) == CONNECTIONS, "len(made) == CONNECTIONS", timeout=5
            )
            taken_in_one_turn = len(made)
            for each in made:
                each.transport.close()
        return taken_in_one_turn

    assert run(scenario()) == CONNECTIONS


def test_leaves_connections_waiting_once_closed(
    run: Callable[[Awaitable[Any]], Any], listening: socket.socket
) -> None:
    made: list[Counted] = []
    protocol = type("Made", (Counted,), {"made": made})

    async def scenario() -> int:
        listener = EagerListener(listening, protocol, backlog=128)
        with ExitStack() as clients:
            connect(clients, listening.getsockname(), 3)
            await wait_for_async(lambda: len(made) == 3, "len(made) == 3", timeout=5)
            listener.close()
            await listener.wait_closed()
            connect(clients, listening.getsockname(), 1)
            await asyncio.sleep(0.1)  # turns of the loop in which a listener would take it
            listening.setblocking(True)
            listening.settimeout(5)
            late, _ = listening.accept()  # still waiting: nobody accepted it
            late.close()
            for each in made:
                each.transport.close()
        return len(made)

    assert run(scenario()) == 3
