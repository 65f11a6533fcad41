"""The soak's load: requests of the mix over REST and gRPC, each answer checked.

REST goes over the tools' HTTP/1.1 client (inferd.tools.leanhttp, the one openload
drives too), its streams read by the benchmarks' one SSE parser (benchmarks.sse); one connection
kept alive per concurrent slot (a client that leaves uses a connection of its own
and closes it); gRPC over one ``grpc.aio`` channel, as a real client would: not the bare HTTP/2
client of h2grpc.py, which reads no ``grpc-status`` and cannot cancel a call, while
the soak checks every status and sends clients that leave.
Requests alternate between the two protocols. :meth:`Load.run` sends a batch of
requests from ``concurrency`` slots and returns once every one has been answered:
the soak samples the server between batches, with nothing in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import orjson

from inferd.protocol import pb_grpc
from inferd.tools.leanhttp import LeanHttpConnection
from inferd.tools.v2client import Endpoint, http_post

from .soakmix import ANSWER, ERROR, GRPC_STREAM_REQUESTS, LEAVE, STREAM, STREAM_PARTS, Kind
from .sse import MESSAGE, sse_events

LEAVE_AFTER = 0.005  # seconds a leaving client waits before it goes
KEPT_PROBLEMS = 10
ANSWER_TIMEOUT_S = 60.0  # seconds, as for the gRPC calls


def rest_outputs(answer: Any) -> list[Any] | None:
    outputs = answer.get("outputs") if isinstance(answer, dict) else None
    return None if outputs is None else [output["data"] for output in outputs]


@dataclass
class Tally:
    """Requests sent by kind and protocol, and the first problems seen."""

    sent: Counter[str] = field(default_factory=Counter)
    problems: int = 0
    examples: list[str] = field(default_factory=list)

    def record(self, kind: Kind, protocol: str, problem: str) -> None:
        self.sent[f"{protocol} {kind.name}"] += 1
        if problem:
            self.problems += 1
            if len(self.examples) < KEPT_PROBLEMS:
                self.examples.append(f"{protocol}: {problem}")


class Load:
    """The clients of one soak: ``run`` a batch of kinds, then the next."""

    def __init__(self, host: str, http_port: int, grpc_port: int, concurrency: int) -> None:
        self.host, self.http_port = host, http_port
        self._channel = grpc.aio.insecure_channel(f"{host}:{grpc_port}")
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)
        self._endpoint = Endpoint(host, http_port)
        self._connections = [
            LeanHttpConnection(self._endpoint, ANSWER_TIMEOUT_S) for _ in range(concurrency)
        ]
        self._sent = 0
        self.tally = Tally()

    async def run(self, kinds: Sequence[Kind]) -> None:
        """Send ``kinds`` (one request each) from every slot; return once all are done."""
        queue = iter(kinds)
        await asyncio.gather(*(self._slot(connection, queue) for connection in self._connections))

    async def close(self) -> None:
        for connection in self._connections:
            await connection.close()
        await self._channel.close()

    async def _slot(self, connection: LeanHttpConnection, queue: Any) -> None:
        for kind in queue:
            self._sent += 1
            if self._sent % 2:
                self.tally.record(kind, "rest", await self._rest(connection, kind))
            else:
                self.tally.record(kind, "grpc", await self._grpc(kind))

    async def _rest(self, connection: LeanHttpConnection, kind: Kind) -> str:
        suffix = "infer_stream" if kind.expect == STREAM else "infer"
        path = f"/v2/models/{kind.model}/{suffix}"
        if kind.expect == LEAVE:
            await self._leave_rest(path, kind.rest_body)
            return ""
        reply = await connection.exchange(http_post(self._endpoint, path, kind.rest_body))
        if reply.error:
            return f"{kind.name}: no answer: {reply.error}"
        status, content = reply.status, reply.body
        if kind.expect == STREAM:
            return _check_rest_stream(kind, status, content)
        answer = orjson.loads(content)
        error = answer.get("error", "") if isinstance(answer, dict) else ""
        return kind.check_rest(status, rest_outputs(answer), error)

    async def _leave_rest(self, path: str, body: bytes) -> None:
        _, writer = await asyncio.open_connection(self.host, self.http_port)
        writer.write(http_post(self._endpoint, path, body))
        await asyncio.sleep(LEAVE_AFTER)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    async def _grpc(self, kind: Kind) -> str:
        if kind.expect == STREAM:
            return await self._grpc_stream(kind)
        call = self._stub.ModelInfer(kind.grpc_request, timeout=60)
        if kind.expect == LEAVE:
            await asyncio.sleep(LEAVE_AFTER)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await call
            return ""
        try:
            answer = await call
        except grpc.aio.AioRpcError as error:
            return kind.check_grpc(error.code().name, None, error.details() or "")
        assert kind.expect in (ANSWER, ERROR)
        return kind.check_grpc("OK", list(answer.raw_output_contents), "")

    async def _grpc_stream(self, kind: Kind) -> str:
        call = self._stub.ModelStreamInfer(timeout=60)
        try:
            for _ in range(GRPC_STREAM_REQUESTS):
                await call.write(kind.grpc_request)
            await call.done_writing()
            answers = [answer async for answer in call]
        except grpc.aio.AioRpcError as error:
            return f"{kind.name}: the stream failed: {error.code().name} {error.details()}"
        if len(answers) != GRPC_STREAM_REQUESTS * STREAM_PARTS:
            return f"{kind.name}: {len(answers)} answers on the stream"
        for answer in answers:
            outputs = list(answer.infer_response.raw_output_contents)
            problem = kind.check_grpc("OK", outputs, answer.error_message)
            if problem:
                return problem
        return ""


def _check_rest_stream(kind: Kind, status: int, content: bytes) -> str:
    if status != 200:
        return f"{kind.name}: HTTP {status}: {content[:200]!r}"
    events = sse_events(content)
    if len(events) != STREAM_PARTS:
        return f"{kind.name}: {len(events)} events: {content[:200]!r}"
    for event in events:
        status = 200 if event.kind == MESSAGE else 500
        problem = kind.check_rest(status, rest_outputs(orjson.loads(event.data)), "")
        if problem:
            return problem
    return ""
