"""supervisor/loading.py: what the REST port answers while the fork parent loads."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from inferd.supervisor.loading import loading_app


def _ask(path: str) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    asyncio.run(loading_app(scope, receive, send))
    return sent[0]["status"], sent[1]["body"]


def test_the_probes_are_answered_as_a_loading_lone_server_and_everything_else_says_loading() -> (
    None
):
    assert _ask("/v2/health/live") == (200, b'{"live": true}')
    assert _ask("/v2/health/ready") == (503, b'{"ready": false}')
    assert _ask("/v2/models/iris/versions/2/ready") == (503, b'{"name": "iris", "ready": false}')
    status, body = _ask("/v2/models/iris/infer")
    assert status == 503 and "loading its models" in json.loads(body)["error"]
