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


def test_live_is_answered_and_everything_else_says_loading() -> None:
    assert _ask("/v2/health/live") == (200, b"")
    status, body = _ask("/v2/health/ready")
    assert status == 503 and "loading its models" in json.loads(body)["error"]
    assert _ask("/v2/models/iris/infer")[0] == 503
