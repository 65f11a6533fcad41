"""Accepting connections: every waiting connection at once, not one per turn of the loop.

uvloop's libuv accepts one connection per turn of the event loop (libuv PR 3696:
it relies on the listening socket staying readable). With ``parallel_workers: 0``
a turn runs every ready request's model call, so under load a turn lasts tens of
milliseconds and the 64th of 64 new connections waited ~1.5 s for its first
answer while the first ones were served round after round: those late starters
were the p99 (benchmarks/ ``fairness`` scenario). :class:`EagerListener` takes
every waiting connection each time the socket is readable, as asyncio's own
loop does, and hands each to the loop as an accepted socket.

:class:`EagerAcceptServer` is a uvicorn server that listens that way; it
serves the sockets passed to ``serve`` and nothing else. :func:`listen_tcp`
opens such a socket, or says clearly why it cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections.abc import Callable, Generator
from typing import Any

import uvicorn

from inferd.errors import ConfigurationError

logger = logging.getLogger(__name__)

# Most connections taken per readiness callback: a storm of connections still leaves
# the loop room to serve requests (the rest are taken on the next turn).
MAX_ACCEPTS_PER_TURN = 256
# Out of file descriptors or memory: stop accepting this long, as asyncio does.
RESOURCE_PAUSE_SECONDS = 1.0
_OUT_OF_RESOURCES = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))


class EagerListener:
    """Accepts connections on a listening socket; shaped like ``asyncio.Server``
    where uvicorn uses one (``close``, ``wait_closed``)."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        backlog: int,
        ssl: Any = None,
    ) -> None:
        self._sock = sock
        self._protocol_factory = protocol_factory
        self._ssl = ssl  # the server's SSLContext (TLS), or None
        self._loop = asyncio.get_running_loop()
        self._handshakes: set[asyncio.Future[Any]] = set()
        self._closed = False
        sock.setblocking(False)
        sock.listen(backlog)
        self._loop.add_reader(sock.fileno(), self._accept_waiting)

    def close(self) -> None:
        """Stop accepting (the socket itself is its owner's to close)."""
        if not self._closed:
            self._closed = True
            self._loop.remove_reader(self._sock.fileno())

    async def wait_closed(self) -> None:
        """Nothing to wait for: accepted connections belong to their protocols."""

    def _accept_waiting(self) -> None:
        for _ in range(MAX_ACCEPTS_PER_TURN):
            try:
                connection, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # none left
            except ConnectionAbortedError:
                continue  # the client gave up before we took it
            except OSError as error:
                if error.errno not in _OUT_OF_RESOURCES:
                    raise
                self._pause(error)
                return
            self._hand_over(connection)

    def _hand_over(self, connection: socket.socket) -> None:
        connection.setblocking(False)
        handshake = asyncio.ensure_future(
            self._loop.connect_accepted_socket(self._protocol_factory, connection, ssl=self._ssl)
        )
        self._handshakes.add(handshake)
        handshake.add_done_callback(lambda done: self._handshake_done(done, connection))

    def _handshake_done(self, done: asyncio.Future[Any], connection: socket.socket) -> None:
        self._handshakes.discard(done)
        if done.cancelled() or done.exception() is None:
            return
        logger.debug("Dropped a connection that failed to open: %s", done.exception())
        connection.close()

    def _pause(self, error: OSError) -> None:
        logger.error(
            "Cannot accept connections: %s; accepting again in %.0fs",
            error,
            RESOURCE_PAUSE_SECONDS,
        )
        self._loop.remove_reader(self._sock.fileno())
        self._loop.call_later(RESOURCE_PAUSE_SECONDS, self._resume)

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._accept_waiting)


class EagerAcceptServer(uvicorn.Server):
    """A uvicorn server whose sockets are served by :class:`EagerListener`s."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if not sockets:
            raise ValueError("EagerAcceptServer serves the listening sockets given to serve()")
        await super().startup(sockets=[])  # uvicorn's state, no listener of its own
        backlog = self.config.backlog
        ssl = self.config.ssl  # TLS: each accepted connection is wrapped in it
        self.servers = [EagerListener(sock, self._new_protocol, backlog, ssl) for sock in sockets]  # type: ignore[misc]

    def _new_protocol(self) -> asyncio.Protocol:
        """What uvicorn's own listener makes for each connection."""
        config = self.config
        protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=self.server_state, app_state=self.lifespan.state
        )
        return protocol


class SignalFreeServer(EagerAcceptServer):
    """An :class:`EagerAcceptServer` that leaves SIGTERM and SIGINT to its owner (the
    server's drain, or the supervisor): uvicorn's own handlers would stop it at once."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def listen_tcp(host: str, port: int, what: str, fix: str, shared: bool = False) -> socket.socket:
    """A socket listening on ``host:port``; ConfigurationError saying what to ``fix``
    when it cannot. ``shared``: with SO_REUSEPORT, beside the other protocol processes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, reuse_port=shared)
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise ConfigurationError(
            f"Cannot listen for {what} on {host}:{port}: {reason}; {fix}"
        ) from None
