"""One load process of ``inferd bench``: a window of closed- or open-loop requests.

The request is encoded once (HTTP bytes or a serialized ModelInferRequest) and
sent as is, so the client's cost per request is a write and a read. Closed loop:
``connections`` workers each send their next request when the last answer is in.
Open loop: request ``i`` is due at ``i / rate`` whatever the answers, and its
latency counts from when it was due, so a slow server cannot hide its queueing
by slowing the load (coordinated omission). Runs in a process of its own
(several run in parallel) and returns plain numbers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from inferd.tools.leanhttp import LeanHttpConnection
from inferd.tools.v2client import Endpoint, GrpcConnection, Reply

MAX_OUTSTANDING = 2000  # open loop: requests in flight before new ones count as not sent


@dataclass(frozen=True)
class LoadSpec:
    """What one process sends, where, and how."""

    endpoint: Endpoint
    transport: str  # "rest" or "grpc"
    payload: bytes  # HTTP request bytes (rest) or a ModelInferRequest (grpc)
    seconds: float
    connections: int = 1  # closed loop
    rate: float = 0.0  # open loop (requests/s) when > 0
    timeout_s: float = 30.0


@dataclass(frozen=True)
class Window:
    """What one process measured: latencies (s) of answered requests, and the rest."""

    latencies: np.ndarray
    errors: int
    unsent: int
    seconds: float
    first_error: str = ""
    cpu_s: float = 0.0  # this process's CPU time over the window: the generator's own cost


def run_window(spec: LoadSpec) -> Window:
    """Entry point in the load process."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_window(spec))
    return uvloop.run(_window(spec))


class _Sender:
    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.grpc = (
            GrpcConnection(spec.endpoint, spec.timeout_s) if spec.transport == "grpc" else None
        )
        self.idle: list[LeanHttpConnection] = []
        self.opened: list[LeanHttpConnection] = []

    async def send(self) -> Reply:
        if self.grpc is not None:
            return await self.grpc.infer(self.spec.payload)
        connection = self.idle.pop() if self.idle else self._open()
        try:
            return await connection.exchange(self.spec.payload)
        finally:
            self.idle.append(connection)

    def _open(self) -> LeanHttpConnection:
        connection = LeanHttpConnection(self.spec.endpoint, self.spec.timeout_s)
        self.opened.append(connection)
        return connection

    async def close(self) -> None:
        for connection in self.opened:
            await connection.close()
        if self.grpc is not None:
            await self.grpc.close()


class _Tally:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error = ""

    def record(self, reply: Reply, latency: float) -> None:
        if reply.ok:
            self.latencies.append(latency)
            return
        self.errors += 1
        if not self.first_error:
            self.first_error = reply.error or f"HTTP {reply.status}: {reply.body[:200]!r}"


async def _window(spec: LoadSpec) -> Window:
    sender, tally = _Sender(spec), _Tally()
    await _warm(sender, spec)
    started, cpu_started = time.perf_counter(), time.process_time()
    if spec.rate > 0:
        unsent = await _open_loop(sender, tally, spec, started)
    else:
        unsent = 0
        await asyncio.gather(
            *(_closed_loop(sender, tally, started + spec.seconds) for _ in range(spec.connections))
        )
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    await sender.close()
    latencies = np.asarray(tally.latencies)
    return Window(latencies, tally.errors, unsent, elapsed, tally.first_error, cpu)


async def _warm(sender: _Sender, spec: LoadSpec) -> None:
    """Open the connections before the clock starts (a real client keeps them open)."""
    count = 1 if spec.rate > 0 else spec.connections
    connections = [sender._open() for _ in range(count)] if sender.grpc is None else []
    replies = [connection.exchange(spec.payload) for connection in connections]
    if sender.grpc is not None:
        replies = [sender.grpc.infer(spec.payload)]
    await asyncio.gather(*replies)
    sender.idle.extend(connections)


async def _closed_loop(sender: _Sender, tally: _Tally, deadline: float) -> None:
    clock = time.perf_counter
    while (now := clock()) < deadline:
        reply = await sender.send()
        tally.record(reply, clock() - now)


async def _open_loop(sender: _Sender, tally: _Tally, spec: LoadSpec, started: float) -> int:
    total = int(spec.rate * spec.seconds)
    in_flight: set[asyncio.Task[None]] = set()
    unsent = 0

    async def one(due: float) -> None:
        reply = await sender.send()
        tally.record(reply, time.perf_counter() - due)

    for index in range(total):
        due = started + index / spec.rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(in_flight) >= MAX_OUTSTANDING:
            unsent += 1
            continue
        task = asyncio.create_task(one(due))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.wait(in_flight, timeout=spec.timeout_s)
    return unsent
