"""The uvicorn servers one process runs (REST, metrics, private sockets): their
configuration, their start and their stop, shared by every role of the server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Sequence
from typing import Any

import uvicorn

from inferd.observability.logs import SERVER_EVENT
from inferd.settings import ServerSettings

logger = logging.getLogger(__name__)

# One HTTP server to run: what it is, the server, its bound socket.
Listening = tuple[str, uvicorn.Server, socket.socket]
# One HTTP server running: what it is, the server, its task.
Running = tuple[str, uvicorn.Server, asyncio.Task[None]]


def uvicorn_config(settings: ServerSettings, app: Any, port: int, **options: Any) -> uvicorn.Config:
    """One of this process's HTTP servers, on this event loop, logging through ours.

    ``access_log`` is the same for all: uvicorn's switch is one logger for all its
    servers (metrics scrapes are kept out of it by a filter, see observability/logs.py)."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=port,
        lifespan="off",
        access_log=settings.access_log_enabled,
        log_config=None,
        **({"http": "httptools"} | options),
    )


def run_servers(listening: list[Listening]) -> list[Running]:
    """Each server serving its socket, as a task named after it."""
    return [
        (what, server, asyncio.create_task(server.serve([sock]), name=what))
        for what, server, sock in listening
    ]


async def wait_started(
    what: str, server: uvicorn.Server, task: asyncio.Task[None], host: str
) -> None:
    """Returns once ``server`` serves; raises why it stopped if it stopped first."""
    config = server.config
    where = config.uds or f"{host}:{config.port}"
    while not server.started:
        if task.done():
            await task  # re-raises why it stopped
            raise RuntimeError(f"The {what} on {where} stopped")
        await asyncio.sleep(0.01)
    # A private socket (a protocol process's) is its own detail; a public port the server's.
    if config.uds:
        logger.debug("%s listening on %s", what, where)
    else:
        logger.info("%s listening on %s", what, where, extra=SERVER_EVENT)


async def stop_servers(servers: Sequence[Running]) -> None:
    """Every server told to stop first, then each awaited: one by one, each uvicorn
    server's shutdown tick (0.1 s) added up (a protocol process's private REST and
    metrics servers: 0.2 s, past the cut)."""
    for _, server, _ in servers:
        server.should_exit = True
    for _, _, task in servers:
        with contextlib.suppress(Exception, SystemExit):
            await task
