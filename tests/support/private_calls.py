"""A handler answering private calls (workers/private_calls.py) on a socket while a
test's block runs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from inferd.server.protocol_role import bind_unix
from inferd.workers.private_calls import Handler, close_server, serve_calls


@contextlib.asynccontextmanager
async def answering(socket_path: Path, handle: Handler) -> AsyncIterator[Path]:
    """``handle`` answering calls on ``socket_path`` while the block runs; yields the path."""
    server = await serve_calls(bind_unix(socket_path), handle)
    try:
        yield socket_path
    finally:
        await close_server(server)
