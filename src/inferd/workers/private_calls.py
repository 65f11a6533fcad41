"""One call on a private unix socket, in the frames of every private channel: the
coordinator's channel (a protocol process to the supervisor's coordinator, the
coordinator to each process).

The caller connects, writes its message as one ipc frame (``ipc.encode``) and shuts
its writing side; the server reads to end-of-file, decodes that one frame
(``ipc.decode_frame``), runs its handler, writes one reply frame and closes: a
``RESULT`` with the handler's value, or an ``ERROR`` with the error it raised
(``ipc.error_to_wire``, rebuilt by class on the caller's side), the replies of a
worker's channel (workers/messages.py). The caller reads to end-of-file and decodes
it.

A connection per call, not one held for the process's life: a load that takes
minutes holds only its own connection, a process that died is a refused connect
(``CallUnanswered``) rather than a shared connection to tell from a dead process and
reconnect, and the operations are a handful per operator action, where a connect
costs nothing beside the action.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from inferd.errors import InvalidRequest
from inferd.workers import ipc, messages

logger = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[Any]]
"""What a server does with one message: its value, or the error that refuses it."""

# A reply's call id: one call per connection, so nothing to tell apart.
_CALL_ID = 0


class CallUnanswered(Exception):
    """No answer came: nothing listens at the socket (a process starting, restarting or
    gone), the connection broke, the time ran out, or the reply was no frame."""


async def call(path: Path, message: Any, timeout_s: float | None = None) -> Any:
    """The value the server at ``path`` answers ``message`` with; the error it refused it
    with, rebuilt as its class (``ipc.error_from_wire``); CallUnanswered if none came
    (``timeout_s`` None: no limit, for a load that takes as long as its model)."""
    pieces = ipc.encode(message)
    try:
        async with asyncio.timeout(timeout_s):
            reply = await _exchange(path, pieces)
    except (OSError, TimeoutError) as error:
        raise CallUnanswered(f"{type(error).__name__}: {error}") from None
    try:
        kind, _, body = ipc.decode_frame(reply)
    except (ipc.ProtocolError, TypeError, ValueError) as error:
        raise CallUnanswered(f"{path.name} answered no reply: {error}") from None
    if kind == messages.RESULT:
        return body
    raise ipc.error_from_wire(body)


async def _exchange(path: Path, pieces: list[ipc.Buffer]) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.writelines(pieces)
        writer.write_eof()
        return await reader.read()
    finally:
        writer.close()


async def serve_calls(sock: socket.socket, handle: Handler) -> asyncio.Server:
    """``handle`` answering each call made to ``sock`` (bound, not listening yet)."""
    # Each call's task, held: once its frame is read to end-of-file the event loop
    # stops watching the connection, and nothing else would keep the task (and the
    # calls it awaits) from the collector while the handler runs.
    answering: set[asyncio.Task[Any]] = set()

    async def one_call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        answering.add(task)
        task.add_done_callback(answering.discard)
        try:
            reply = await _answer(handle, await reader.read())
            writer.writelines(reply)
            await writer.drain()
        except ConnectionError:  # the caller left (its own timeout): nothing to tell it
            pass
        finally:
            writer.close()

    return await asyncio.start_unix_server(one_call, sock=sock)


async def _answer(handle: Handler, frame: bytes) -> list[ipc.Buffer]:
    """The reply frame to one received frame."""
    try:
        message = ipc.decode_frame(frame)
    except ipc.ProtocolError as error:
        return _error(InvalidRequest(f"Not a message of a private call: {error}"))
    try:
        value = await handle(message)
    except Exception as error:
        return _error(error)
    try:
        return messages.encode_reply(messages.RESULT, _CALL_ID, value)
    except Exception as error:  # a value that cannot be pickled: say so, not nothing
        logger.exception("Cannot send the answer to %r", message)
        return _error(error)


def _error(error: BaseException) -> list[ipc.Buffer]:
    return messages.encode_reply(messages.ERROR, _CALL_ID, ipc.error_to_wire(error))


async def close_server(server: asyncio.Server) -> None:
    """No more calls taken (the calls under way finish on their own connections)."""
    server.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(server.wait_closed(), 0.1)
