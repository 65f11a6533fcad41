"""One sample of the tracing scenario's in-process figure, in a process of its own.

    python benchmarks/tracing_asgi.py REPOSITORY REQUESTS [ENDPOINT]

Calls the REST app of an inferd server (from the inferd on PYTHONPATH: this tree's
or a baseline's) directly, ``REQUESTS`` times, one iris row each, with tracing to
ENDPOINT (none: tracing off), and prints the CPU and wall microseconds per request
as JSON. A process per sample, so that a baseline tree runs its own code and no
sample inherits another's imports or tracer.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

REQUEST = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]
}


async def sample(repository: Path, requests: int, endpoint: str | None) -> dict[str, float]:
    from inferd.server.app import InferenceServer
    from inferd.settings import ServerSettings

    settings = ServerSettings(
        model_repository_root=str(repository), parallel_workers=0, tracing_server=endpoint
    )
    server = InferenceServer(settings)
    await server.dataplane.load_all()
    app: Any = server.rest_app()
    tracing = getattr(server, "tracing", None)  # a baseline tree may have none
    if tracing is not None:
        from inferd.server.traced import TracedApp

        app = TracedApp(app, tracing)
    body = json.dumps(REQUEST).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {"type": "http", "method": "POST", "path": "/v2/models/iris/infer", "headers": headers}
    statuses: set[int] = set()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.add(message["status"])

    for _ in range(min(requests, 500)):  # warm-up
        await app(dict(scope), receive, send)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(requests):
        await app(dict(scope), receive, send)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if tracing is not None:
        tracing.shutdown(30.0)  # what was traced is exported (the receiver counts it)
    await server.registry.close()
    if statuses != {200}:
        raise SystemExit(f"the REST app answered {sorted(statuses)}")
    return {"cpu_us": cpu / requests * 1e6, "wall_us": wall / requests * 1e6}


if __name__ == "__main__":
    endpoint = sys.argv[3] if len(sys.argv) > 3 else None
    print(json.dumps(asyncio.run(sample(Path(sys.argv[1]), int(sys.argv[2]), endpoint))))
