"""``inferd infer``: batch inference from a file of V2 requests, like ``mlserver infer``.

The input file holds one V2 inference request (JSON) per line. ``workers``
tasks send them concurrently over REST or gRPC, each on its own connection, as
micro-batches of ``batch_size`` requests (stacked on the first dimension, the
answer split back). A request refused as overloaded (503, gRPC UNAVAILABLE or
RESOURCE_EXHAUSTED, no answer) is retried with exponential back-off, honouring
Retry-After, up to ``retries`` attempts in all; other errors are final. Every
line gets one output line: the response with ``parameters.batch_index`` (its
line number, from 0) and ``parameters.inference_id``, or
``{"parameters": {"batch_index": i}, "error": {"status": ..., "msg": ...}}`` --
MLServer's format. Lines are written in input order unless ``ordered`` is off.
"""

from __future__ import annotations

import asyncio
import io
import logging
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import click
import orjson

from inferd.errors import InvalidRequest
from inferd.tools import wire
from inferd.tools.grpc_tls import GrpcSecurity
from inferd.tools.leanhttp import LeanHttpConnection
from inferd.tools.v2client import Endpoint, GrpcConnection, Reply, http_post, infer_path

logger = logging.getLogger("inferd.infer")
BACKOFF_BASE_S = 0.1
BACKOFF_MAX_S = 5.0


@dataclass(frozen=True)
class InferOptions:
    """What ``inferd infer`` was asked to do (MLServer's flags)."""

    url: str
    model_name: str
    input_path: Path
    output_path: Path
    workers: int = 10
    retries: int = 3
    batch_size: int = 1
    binary_data: bool = False
    transport: str = "rest"
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    batch_interval_s: float = 0.0
    batch_jitter_s: float = 0.0
    use_ssl: bool = False
    insecure: bool = False
    ordered: bool = True
    model_version: str = ""
    progress: bool = True


@dataclass
class InferSummary:
    """What a run did."""

    requests: int = 0
    succeeded: int = 0
    failed: int = 0
    retries: int = 0
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def describe(self) -> str:
        return (
            f"{self.requests} requests: {self.succeeded} succeeded, {self.failed} failed, "
            f"{self.retries} retried; {self.seconds:.2f} s, {self.per_second:.1f} requests/s"
        )


Item = tuple[int, bytes]  # (line number, the line)


def run_infer(options: InferOptions) -> InferSummary:
    return asyncio.run(_run(options))


async def _run(options: InferOptions) -> InferSummary:
    endpoint = Endpoint.parse(options.url, options.use_ssl, options.insecure)
    security = await _grpc_security(endpoint) if options.transport == "grpc" else None
    total = sum(1 for line in _lines(options.input_path))
    summary = InferSummary(requests=total)
    batches: asyncio.Queue[list[Item] | None] = asyncio.Queue(2 * options.workers)
    started = time.perf_counter()
    with (
        options.output_path.open("wb") as out,
        click.progressbar(
            length=total,
            label="inferd infer",
            file=sys.stderr if options.progress else io.StringIO(),
        ) as bar,
    ):
        writer = _Writer(out, options.ordered, bar, summary)
        senders = [_Sender(options, endpoint, summary, security) for _ in range(options.workers)]
        tasks = [asyncio.create_task(s.work(batches, writer)) for s in senders]
        for batch in _batches(options.input_path, options.batch_size):
            await batches.put(batch)
        for _ in tasks:
            await batches.put(None)
        await asyncio.gather(*tasks)
        for sender in senders:
            await sender.close()
    summary.seconds = time.perf_counter() - started
    return summary


async def _grpc_security(endpoint: Endpoint) -> GrpcSecurity | None:
    """How the gRPC channels trust the server, settled once for all workers (with
    --insecure it fetches the server's certificate: a blocking handshake, in a thread)."""
    if endpoint.tls is None:
        return None
    try:
        return await asyncio.to_thread(endpoint.grpc_security)
    except OSError as error:  # ssl.SSLError is one too
        raise click.ClickException(
            f"could not read the TLS certificate of {endpoint.netloc} (--insecure): {error}"
        ) from None


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as lines:
        for line in lines:
            if line.strip():
                yield line


def _batches(path: Path, size: int) -> Iterator[list[Item]]:
    batch: list[Item] = []
    for index, line in enumerate(_lines(path)):
        batch.append((index, line))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class _Writer:
    """Writes each line's result, in input order (held until its turn) or as it comes."""

    def __init__(self, out: IO[bytes], ordered: bool, bar: Any, summary: InferSummary) -> None:
        self.out, self.ordered, self.bar, self.summary = out, ordered, bar, summary
        self.pending: dict[int, bytes] = {}
        self.next_index = 0

    def put(self, index: int, result: dict[str, Any]) -> None:
        if "error" in result:
            self.summary.failed += 1
        else:
            self.summary.succeeded += 1
        self.bar.update(1)
        line = orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        if not self.ordered:
            self.out.write(line)
            return
        self.pending[index] = line
        while self.next_index in self.pending:
            self.out.write(self.pending.pop(self.next_index))
            self.next_index += 1


class _Sender:
    """One worker: its own connection, one micro-batch at a time."""

    def __init__(
        self,
        options: InferOptions,
        endpoint: Endpoint,
        summary: InferSummary,
        security: GrpcSecurity | None = None,
    ) -> None:
        self.options, self.summary = options, summary
        self.path = infer_path(options.model_name, options.model_version or None)
        self.endpoint = endpoint
        self.http = LeanHttpConnection(endpoint, options.timeout_s)
        self.grpc = GrpcConnection(endpoint, options.timeout_s, security) if self._grpc else None

    @property
    def _grpc(self) -> bool:
        return self.options.transport == "grpc"

    async def work(self, batches: asyncio.Queue[list[Item] | None], writer: _Writer) -> None:
        while (batch := await batches.get()) is not None:
            started = time.perf_counter()
            for index, result in await self._process(batch):
                writer.put(index, result)
            await self._pace(started)

    async def _pace(self, started: float) -> None:
        interval = self.options.batch_interval_s + random.random() * self.options.batch_jitter_s
        remaining = interval - (time.perf_counter() - started)
        if remaining > 0:
            await asyncio.sleep(remaining)

    async def _process(self, batch: list[Item]) -> list[tuple[int, dict[str, Any]]]:
        results: list[tuple[int, dict[str, Any]]] = []
        parsed: list[tuple[int, dict[str, Any]]] = []
        for index, line in batch:
            try:
                request = orjson.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("a request must be a JSON object")
                parsed.append((index, request))
            except ValueError as error:
                results.append((index, _error(index, "preprocessing error", str(error))))
        if parsed:
            results += await self._infer(parsed)
        return results

    async def _infer(self, parsed: list[tuple[int, dict[str, Any]]]) -> list[Any]:
        indices = [index for index, _ in parsed]
        requests = [request for _, request in parsed]
        try:
            request, rows = wire.merge(requests) if len(requests) > 1 else (requests[0], [0])
            request_id = str(request.get("id") or f"inferd-infer-{indices[0]}")
            request = {**request, "id": request_id}
            reply = await self._send_with_retries(request, request_id)
        except (ValueError, KeyError, TypeError, InvalidRequest) as error:  # bad tensors in a line
            return [(i, _error(i, "preprocessing error", str(error))) for i in indices]
        if not reply.ok:
            message = reply.error or _error_text(reply.body) or f"HTTP {reply.status}"
            status = f"inference error ({reply.status or 'no answer'})"
            return [(i, _error(i, status, message)) for i in indices]
        response = self._decode(reply.body)
        answers = wire.split(response, rows) if len(requests) > 1 else [response]
        for index, answer, original in zip(indices, answers, requests, strict=True):
            parameters = answer.get("parameters") or {}
            answer["parameters"] = {**parameters, "batch_index": index, "inference_id": request_id}
            if len(requests) > 1 and original.get("id"):
                answer["id"] = original["id"]
        return list(zip(indices, answers, strict=True))

    def _decode(self, body: bytes) -> dict[str, Any]:
        if self._grpc:
            return wire.grpc_response_json(body)
        decoded: dict[str, Any] = orjson.loads(body)
        return decoded

    async def _send_with_retries(self, request: dict[str, Any], request_id: str) -> Reply:
        send = self._sender(request, request_id)
        attempt = 1
        while True:
            reply = await send()
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("request %s -> %s %s", request_id, reply.status, reply.body[:500])
            if reply.ok or not reply.retryable or attempt >= self.options.retries:
                return reply
            self.summary.retries += 1
            delay = reply.retry_after or min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
            logger.info(
                "request %s: %s, retry %d in %.2f s", request_id, reply.status, attempt, delay
            )
            await asyncio.sleep(delay * (0.5 + random.random()))
            attempt += 1

    def _sender(self, request: dict[str, Any], request_id: str) -> Any:
        headers = {**self.options.headers, "x-request-id": request_id}
        if self.grpc is not None:
            grpc = self.grpc
            message = wire.grpc_message(
                self.options.model_name, self.options.model_version, request
            )
            metadata = tuple((name.lower(), value) for name, value in headers.items())
            return lambda: grpc.infer(message, metadata)
        body, extra = wire.rest_body(request, self.options.binary_data)
        raw = http_post(self.endpoint, self.path, body, {**headers, **extra})
        return lambda: self.http.exchange(raw)

    async def close(self) -> None:
        await self.http.close()
        if self.grpc is not None:
            await self.grpc.close()


def _error(index: int, status: str, message: str) -> dict[str, Any]:
    return {"parameters": {"batch_index": index}, "error": {"status": status, "msg": message}}


def _error_text(body: bytes) -> str:
    try:
        decoded = orjson.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:500]
    if isinstance(decoded, dict):
        return str(decoded.get("error") or decoded.get("detail") or decoded)
    return str(decoded)
