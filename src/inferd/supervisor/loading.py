"""The REST port while the protocol fork parent loads the start-up models.

Spawned protocol processes open the public ports before they load (a lone server
does too), so a liveness probe is answered during a long load and does not restart
the server. Forked ones exist only once the parent has loaded the models; until
every protocol process is ready the supervisor therefore listens on the REST port
itself (``SO_REUSEPORT``, beside the processes as they open it) with this app:
``/v2/health/live`` answers 200, anything else 503 saying the server is loading,
as a lone server's ``/v2/health/ready`` does meanwhile. gRPC is not answered then.
It stops when every protocol process has loaded its start-up models (the
coordinator's barrier, before any says ready; each opened the ports before it
loaded, and one whose model failed reaches the barrier too).
"""

from __future__ import annotations

import json
from typing import Any

from inferd.observability.metrics import Receive, Scope, Send
from inferd.server.listener import listen_tcp
from inferd.server.transport import rest_options
from inferd.settings import ServerSettings

LIVE_PATH = "/v2/health/live"

LOADING = {"error": "inferd is loading its models and is not ready yet; retry shortly"}


async def loading_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Live, and nothing else yet."""
    if scope["type"] != "http":
        return
    live = scope["path"].rstrip("/") == LIVE_PATH
    body = b"" if live else json.dumps(LOADING).encode()
    headers = [] if live else [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200 if live else 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def loading_service_parts(settings: ServerSettings) -> tuple[Any, Any, dict[str, Any]]:
    """The app, its socket on the REST port (shared) and its uvicorn options (TLS)."""
    fix = "set http_port (or host) to a free port"
    sock = listen_tcp(settings.host, settings.http_port, "the REST server", fix, shared=True)
    return loading_app, sock, rest_options(settings)
