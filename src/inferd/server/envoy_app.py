"""inferd's gRPC service served by Envoy (through pyvoy) instead of grpcio.

``INFERD_MODEL_REPOSITORY=REPO pyvoy --port GRPC_PORT inferd.server.envoy_app:app``:
Envoy speaks HTTP/2 in C++ and runs this ASGI app in its embedded Python; on the
ASGI lifespan's startup the app builds a lone server's parts (server/app.py's
``InferenceServer``, as a Ray replica does: the worker pool, the repository's
models), then answers every gRPC call through server/grpc/asgi.py and the same
servicers, edge and data plane as grpcio's server. ``GET /v2/health/live`` and
``/v2/health/ready`` answer plain HTTP probes. REST, metrics and reflection are not
served here (an experiment measured in benchmarks/README.md, "gRPC through Envoy").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from inferd.server.app import InferenceServer
from inferd.server.grpc.asgi import GrpcAsgi, Receive, Scope, Send, methods
from inferd.server.grpc.health import HealthServicer, ShutdownSignal
from inferd.server.grpc.servicer import InferenceServicer
from inferd.settings.loader import load_server_settings

REPOSITORY_ENV = "INFERD_MODEL_REPOSITORY"
LIVE_PATH = "/v2/health/live"
READY_PATH = "/v2/health/ready"


class EnvoyApp:
    """The ASGI app: lifespan builds and closes the server; HTTP requests are gRPC calls."""

    def __init__(self, repository: Path | None = None) -> None:
        self._repository = repository
        self._server: InferenceServer | None = None
        self._shutdown = ShutdownSignal()
        self._grpc: GrpcAsgi | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            if scope["method"] == "GET":
                await self._probe(scope["path"], send)
            elif self._grpc is not None:
                await self._grpc(scope, receive, send)
            else:
                await _plain(send, 503, b"not started\n")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._start()
                except Exception as error:
                    await send({"type": "lifespan.startup.failed", "message": str(error)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._shutdown.set()
                if self._server is not None:
                    await self._server.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        repository = self._repository or Path(os.environ[REPOSITORY_ENV])
        settings = load_server_settings(repository)
        server = self._server = InferenceServer(settings)
        await server.pool.start()
        await server.load_startup_models()
        edge = server.grpc_edge()
        table = methods(
            InferenceServicer(edge, self._shutdown),
            HealthServicer(server.dataplane, self._shutdown),
        )
        limit = settings.grpc_max_message_length or settings.max_request_size
        self._grpc = GrpcAsgi(table, limit)

    async def _probe(self, path: str, send: Send) -> None:
        server = self._server
        if path == LIVE_PATH:
            up = server is not None and server.dataplane.live()
        elif path == READY_PATH:
            up = server is not None and server.dataplane.ready() and not self._shutdown.is_set
        else:
            await _plain(send, 404, b"gRPC here; GET only /v2/health/live and /ready\n")
            return
        await _plain(send, 200 if up else 503, b"")


async def _plain(send: Send, status: int, text: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": text})


app: Any = EnvoyApp()
