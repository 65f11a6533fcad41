"""grpc_floor_server.py's model call behind Envoy instead of grpcio (via pyvoy).

For ``python -m benchmarks grpc --envoy-floor PYVOY``: pyvoy runs this ASGI app in Envoy,
which speaks HTTP/2 and gRPC framing in C++ and hands Python one call per
request, with trailers. The model call is the very same ``answer()``, so the
gap between this and the grpcio floor is what the transport costs. Only unary
ModelInfer is served (no streaming, health, reflection, deadlines or
compression): a measurement, not a server.

Needs a virtualenv with pyvoy, numpy, scikit-learn, joblib and protobuf (the
benchmark puts ``src/`` and ``benchmarks/`` on PYTHONPATH); the repository to
serve comes in ``INFERD_FLOOR_REPO``. A repository holding the file ``INFERD_MARKER``
is served by inferd itself instead (``inferd.server.envoy_app``: the whole gRPC
service on inferd's data plane, for ``grpc-floor``'s "inferd envoy"); that needs
inferd's dependencies in the virtualenv too (``pip install -e '.[sklearn]' pyvoy``).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from grpc_floor_server import MODEL_INFER, answer, load_model

REPO = Path(os.environ["INFERD_FLOOR_REPO"])
INFERD_MARKER = "serve-with-inferd"
GRPC_HEADERS = [(b"content-type", b"application/grpc")]


async def floor_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] != MODEL_INFER:  # the harness's readiness poll
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    reply = answer(ESTIMATOR, bytes(body[5:]))  # past the 5-byte gRPC frame header
    await send(
        {"type": "http.response.start", "status": 200, "headers": GRPC_HEADERS, "trailers": True}
    )
    await send({"type": "http.response.body", "body": struct.pack(">BI", 0, len(reply)) + reply})
    await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")]})


app: Any
if (REPO / INFERD_MARKER).exists():
    from inferd.server.envoy_app import EnvoyApp

    app = EnvoyApp(REPO)
else:
    _, ESTIMATOR = load_model(REPO)
    app = floor_app
