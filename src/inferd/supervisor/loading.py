"""The REST port while the protocol fork parent loads the start-up models.

Spawned protocol processes open the public ports before they load (a lone server
does too), so a liveness probe is answered during a long load and does not restart
the server. Forked ones exist only once the parent has loaded the models; until
every protocol process is ready the supervisor therefore listens on the REST port
itself (``SO_REUSEPORT``, beside the processes as they open it) with this app:
``/v2/health/live`` answers 200 and ``/v2/health/ready`` 503, as a lone server's do
while it loads, the repository index lists the models on disk as a loading lone
server's does (the start-up models LOADING, the broken folders UNAVAILABLE with
why), anything else 503 saying the server is loading. gRPC is not answered then.
It stops when every protocol process has loaded its start-up models (the
coordinator's barrier, before any says ready; each opened the ports before it
loaded, and one whose model failed reaches the barrier too).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from inferd.errors import ConfigurationError, InferdError
from inferd.observability.metrics import Receive, Scope, Send
from inferd.server.listener import listen_tcp
from inferd.server.rest.codec import decode_index_request
from inferd.server.transport import rest_options
from inferd.serving.repository import ModelRepository, RepositoryScan
from inferd.serving.repository_index import NOT_LOADED
from inferd.settings import ServerSettings
from inferd.types import ModelState, RepositoryEntry

LOADING = {"error": "inferd is loading its models and is not ready yet; retry shortly"}
_MODEL_READY = re.compile(r"/v2/models/(?P<name>[^/]+)(?:/versions/[^/]+)?/ready")
# What the health probes get meanwhile: a lone server's answers while it loads.
HEALTH = {
    "/v2/health/live": (200, {"live": True}),
    "/v2/health/ready": (503, {"ready": False}),
}


INDEX = "/v2/repository/index"


async def loading_app(settings: ServerSettings, scope: Scope, receive: Receive, send: Send) -> None:
    """Live, its repository index, and nothing else yet."""
    if scope["type"] != "http":
        return
    path = scope["path"].rstrip("/")
    answer: Any
    model = _MODEL_READY.fullmatch(path)
    if model is not None:
        status, answer = 503, {"name": model["name"], "ready": False}
    elif path == INDEX and scope["method"] == "POST":
        status, answer = _index(settings, await _body(receive))
    else:
        status, answer = HEALTH.get(path, (503, LOADING))
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(answer).encode()})


def _index(settings: ServerSettings, body: bytes) -> tuple[int, Any]:
    """The repository index while the start-up models load: each model on disk LOADING
    (not loaded, without start-up loading), each broken folder UNAVAILABLE with why.
    Read now, as a lone server reads its repository for each index."""
    try:
        ready = decode_index_request(body)
    except InferdError as error:
        return 400, {"error": error.message}
    at_start = settings.load_models_at_startup
    repository = ModelRepository(Path(settings.model_repository_root), loaded_later=not at_start)
    try:
        scan = repository.scan()
    except ConfigurationError:  # the root went: as a lone server's index, nothing found
        scan = RepositoryScan()
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

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await loading_app(settings, scope, receive, send)  # a coroutine: uvicorn's ASGI 3

    return app, sock, rest_options(settings)
