"""The REST port while the protocol fork parent loads the start-up models.

Spawned protocol processes open the public ports before they load (a lone server
does too), so a liveness probe is answered during a long load and does not restart
the server. Forked ones exist only once the parent has loaded the models; until
every protocol process is ready the supervisor therefore listens on the REST port
itself (``SO_REUSEPORT``, beside the processes as they open it) with this app:
``/v2/health/live`` answers 200 and ``/v2/health/ready`` 503, as a lone server's do
while it loads; ``POST /v2/repository/index`` lists the repository's models as a
lone server does while it loads (those loaded at start ``LOADING``, the others
``UNAVAILABLE``); anything else 503 saying the server is loading. On the gRPC
port (:class:`LoadingGrpc`, shared the same way) the health service answers as a
lone server's does while it loads: ``liveness`` SERVING, readiness (``""``, the
inference service) NOT_SERVING; any other method is UNIMPLEMENTED. That server
runs in a process of its own, forked from the supervisor before its event loop as
the protocol fork parent is (:func:`fork_grpc_health`): once gRPC's threads run in
a process, each later fork of it (the supervisor spawns the model host and
restarted processes) makes gRPC log that it skipped its fork handlers.
Both stop when every protocol process has loaded its start-up models (the
coordinator's barrier, before any says ready; each opened the ports before it
loaded, and one whose model failed reaches the barrier too).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2_grpc

from inferd.errors import ConfigurationError, InvalidRequest
from inferd.observability.metrics import Receive, Scope, Send
from inferd.server.access import api_guards
from inferd.server.grpc.access import access_interceptors
from inferd.server.grpc.health import HealthServicer, ShutdownSignal
from inferd.server.grpc.server import grpc_address
from inferd.server.listener import listen_tcp
from inferd.server.rest.codec import decode_index_request
from inferd.server.transport import (
    add_grpc_port,
    grpc_options,
    grpc_port_credentials,
    rest_options,
)
from inferd.serving.repository import ModelRepository, RepositoryScan
from inferd.serving.repository_index import NOT_LOADED
from inferd.settings import ServerSettings
from inferd.supervisor.protocol_forks import EarlyParent, fork_early
from inferd.types import ModelState, RepositoryEntry
from inferd.workers.fork_safety import fork_hazards
from inferd.workers.worker import die_with_parent

logger = logging.getLogger(__name__)

LOADING = {"error": "inferd is loading its models and is not ready yet; retry shortly"}
_MODEL_READY = re.compile(r"/v2/models/(?P<name>[^/]+)(?:/versions/[^/]+)?/ready")
# What the health probes get meanwhile: a lone server's answers while it loads.
INDEX_PATH = "/v2/repository/index"
HEALTH = {
    "/v2/health/live": (200, {"live": True}),
    "/v2/health/ready": (503, {"ready": False}),
}


def loading_app(settings: ServerSettings) -> Any:
    """The ASGI app answering while the models of ``settings``' repository load."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"].rstrip("/")
        answer: Any
        model = _MODEL_READY.fullmatch(path)
        if model is not None:
            status, answer = 503, {"name": model["name"], "ready": False}
        elif path == INDEX_PATH and scope["method"] == "POST":
            status, answer = _index(settings, await _body(receive))
        else:
            status, answer = HEALTH.get(path, (503, LOADING))
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(answer).encode()})

    return app


def _index(settings: ServerSettings, body: bytes) -> tuple[int, Any]:
    """The repository index as a lone server answers it while its start-up load runs."""
    try:
        ready = decode_index_request(body)
    except InvalidRequest as error:
        return 400, {"error": str(error)}
    at_start = settings.load_models_at_startup
    repository = ModelRepository(Path(settings.model_repository_root), loaded_later=not at_start)
    try:
        scan = repository.scan()
    except ConfigurationError:
        scan = RepositoryScan()
    # At the start every model found loads; else none does until it is asked for.
    state, reason = (ModelState.LOADING, "") if at_start else (ModelState.UNAVAILABLE, NOT_LOADED)
    entries = [RepositoryEntry(m.name, m.version, state, reason) for m in scan.models]
    entries += [
        RepositoryEntry(b.folder, None, ModelState.UNAVAILABLE, b.error) for b in scan.broken
    ]
    if ready is not None:
        entries = [e for e in entries if (e.state is ModelState.READY) == ready]
    entries.sort(key=lambda e: (e.name, e.version or ""))
    return 200, [entry.to_dict() for entry in entries]


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def loading_service_parts(settings: ServerSettings) -> tuple[Any, Any, dict[str, Any]]:
    """The app, its socket on the REST port (shared) and its uvicorn options (TLS)."""
    fix = "set http_port (or host) to a free port"
    sock = listen_tcp(settings.host, settings.http_port, "the REST server", fix, shared=True)
    return loading_app(settings), sock, rest_options(settings)


class _Loading:
    """The server's health while it loads: live, not ready."""

    def ready(self) -> bool:
        return False

    def live(self) -> bool:
        return True


class LoadingGrpc:
    """gRPC health on the gRPC port (shared) while the protocol fork parent loads,
    behind the access rules a protocol process's health has."""

    def __init__(self, settings: ServerSettings) -> None:
        self.address = grpc_address(settings.host, settings.grpc_port)
        self._settings = settings
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Listen. Settings a process cannot start with (access keys it cannot read), or
        a port that cannot be shared, are left to the processes: each says why."""
        settings = self._settings
        try:
            interceptors = access_interceptors(api_guards(settings))
            credentials = grpc_port_credentials(settings)
        except ConfigurationError as error:
            logger.debug("No gRPC health while the models load: %s", error)
            return
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[("grpc.so_reuseport", 1), *grpc_options(settings)],
        )
        health = HealthServicer(_Loading(), ShutdownSignal())
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        try:
            port = add_grpc_port(server, self.address, credentials)
        except RuntimeError as error:
            port = 0
            logger.debug("gRPC bind failed: %s", error)
        if not port:
            logger.debug("No gRPC health on %s while the models load", self.address)
            return
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0)


# How long the gRPC health process may take to exit once told to.
HEALTH_EXIT_SECONDS = 2.0
_GO = b"g"


class GrpcHealthProcess:
    """The supervisor's handle on the process serving :class:`LoadingGrpc`."""

    def __init__(self, process: EarlyParent) -> None:
        self._process = process

    def start(self) -> None:
        """Listen now (the public ports were checked free)."""
        self._process.sock.send(_GO)

    async def stop(self) -> None:
        """It stops listening and exits (killed if it takes too long)."""
        self._process.sock.close()
        try:
            await asyncio.wait_for(self._process.wait(), HEALTH_EXIT_SECONDS)
        except TimeoutError:
            self._process.kill()
            await self._process.wait()


def fork_grpc_health(settings: ServerSettings) -> GrpcHealthProcess | None:
    """Fork the process that answers gRPC health while the models load (from the
    supervisor, before any event loop or thread); None when forking is not safe."""
    if fork_hazards():
        return None
    supervisor = os.getpid()

    def serve(theirs: socket.socket) -> None:
        die_with_parent(supervisor)
        _serve_health(settings, theirs)

    try:
        return GrpcHealthProcess(fork_early(serve, logger, "The gRPC health process failed"))
    except OSError as error:
        logger.debug("No gRPC health while the models load: %s", error)
        return None


def _serve_health(settings: ServerSettings, sock: socket.socket) -> None:
    """Wait for the word, serve until the supervisor closes its end."""
    # A Ctrl-C reaches the whole group, a service manager's SIGTERM every process:
    # the supervisor stops it.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    if sock.recv(1) != _GO:
        return

    async def serve() -> None:
        server = LoadingGrpc(settings)
        await server.start()
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_recv(sock, 1)  # b"": the supervisor closed it
        await server.stop()

    asyncio.run(serve())
