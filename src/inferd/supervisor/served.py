"""A service the supervisor serves beside its processes (the coordinator, the summed
metrics, the repository poll, the port answered while the protocol parent loads):
what it is, how it is served on the socket bound for it, and how it stops."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from inferd.server.listener import SignalFreeServer
from inferd.workers.private_calls import Handler, serve_calls


@dataclass(frozen=True)
class Service:
    """What the supervisor serves on a socket bound for it: an ASGI ``app`` (uvicorn
    serves it; ``options``: uvicorn's for it, TLS: ``transport.metrics_options`` for
    ``metrics_ssl``), or private ``calls`` in ipc frames (workers/private_calls.py:
    the coordinator's); ``background``: work it does beside, run as a task while it is
    served (the repository poll), which returns once the supervisor stops."""

    what: str
    app: Any
    sock: socket.socket
    options: Mapping[str, Any] = field(default_factory=dict)
    background: Callable[[], Coroutine[Any, Any, None]] | None = None
    calls: Handler | None = None


# A service being served: its uvicorn server (None for private calls), the task
# serving it, and its background's.
RunningService = tuple[uvicorn.Server | None, asyncio.Task[None], asyncio.Task[None] | None]


def serve_service(service: Service) -> RunningService:
    beside: asyncio.Task[None] | None = None
    if service.background is not None:
        beside = asyncio.create_task(service.background(), name=f"{service.what}: beside")
    if service.calls is not None:
        answering = _answer_calls(service.sock, service.calls)
        return None, asyncio.create_task(answering, name=service.what), beside
    config = uvicorn.Config(
        service.app,
        lifespan="off",
        access_log=False,
        log_config=None,
        **({"server_header": False} | dict(service.options)),
    )
    server = SignalFreeServer(config)
    return server, asyncio.create_task(server.serve([service.sock]), name=service.what), beside


async def _answer_calls(sock: socket.socket, handle: Handler) -> None:
    """``handle`` answering calls on ``sock`` until cancelled (the calls under way are
    not waited for: their processes are gone by then)."""
    server = await serve_calls(sock, handle)
    try:
        await asyncio.Future()
    finally:
        server.close()


async def end_services(running: Sequence[RunningService]) -> None:
    """At the supervisor's exit, once every process it ran has exited: nothing is left
    for its services to answer (the metrics port's scrapers retry elsewhere), so they
    are cancelled rather than shut down in order. uvicorn's orderly shutdown (up to a
    0.1 s tick, then a fixed 0.1 s pause) ended the whole server that much after the
    last process, past shutdown_grace_seconds. Their sockets close as the process exits
    (the private folder's with it)."""
    tasks = [each for _, task, beside in running for each in (task, beside) if each]
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(Exception, SystemExit, asyncio.CancelledError):
            await task


async def stop_services(running: Sequence[RunningService]) -> None:
    """Every service told to stop first, then each awaited: one by one, each uvicorn
    server's shutdown ticks (0.1 s each) added up past shutdown_grace_seconds."""
    for server, task, beside in running:
        if server is not None:
            server.should_exit = True
        else:
            task.cancel()
        if beside is not None:
            beside.cancel()
    for _, task, beside in running:
        for each in (task, beside):
            if each is not None:
                with contextlib.suppress(Exception, SystemExit, asyncio.CancelledError):
                    await each
