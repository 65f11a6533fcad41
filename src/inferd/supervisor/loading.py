"""The REST port while the protocol fork parent loads the start-up models.

Spawned protocol processes open the public ports before they load (a lone server
does too), so a liveness probe is answered during a long load and does not restart
the server. Forked ones exist only once the parent has loaded the models; until
every protocol process is ready the supervisor therefore listens on the REST port
itself (``SO_REUSEPORT``, beside the processes as they open it) with this app:
``/v2/health/live`` answers 200 and ``/v2/health/ready`` 503, as a lone server's do
while it loads, anything else 503 saying the server is loading. gRPC is not answered then.
It stops when every protocol process has loaded its start-up models (the
coordinator's barrier, before any says ready; each opened the ports before it
loaded, and one whose model failed reaches the barrier too).
"""

from __future__ import annotations

import json
import re
from typing import Any

from inferd.observability.metrics import Receive, Scope, Send
from inferd.server.listener import listen_tcp
from inferd.server.transport import rest_options
from inferd.settings import ServerSettings

LOADING = {"error": "inferd is loading its models and is not ready yet; retry shortly"}
_MODEL_READY = re.compile(r"/v2/models/(?P<name>[^/]+)(?:/versions/[^/]+)?/ready")
# What the health probes get meanwhile: a lone server's answers while it loads.
HEALTH = {
    "/v2/health/live": (200, {"live": True}),
    "/v2/health/ready": (503, {"ready": False}),
}


async def loading_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Live, and nothing else yet."""
    if scope["type"] != "http":
        return
    path = scope["path"].rstrip("/")
    answer: dict[str, Any]
    model = _MODEL_READY.fullmatch(path)
    if model is not None:
        status, answer = 503, {"name": model["name"], "ready": False}
    else:
        status, answer = HEALTH.get(path, (503, LOADING))
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(answer).encode()})


def loading_service_parts(settings: ServerSettings) -> tuple[Any, Any, dict[str, Any]]:
    """The app, its socket on the REST port (shared) and its uvicorn options (TLS)."""
    fix = "set http_port (or host) to a free port"
    sock = listen_tcp(settings.host, settings.http_port, "the REST server", fix, shared=True)
    return loading_app, sock, rest_options(settings)
