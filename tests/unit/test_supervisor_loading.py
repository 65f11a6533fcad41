"""supervisor/loading.py: what the REST port answers while the fork parent loads."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from inferd.supervisor import loading
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


class _Started:
    """A Child as stop_once_served reads it: its process (once started) and ready."""

    def __init__(self) -> None:
        self.process: object | None = None
        self.ready = asyncio.Event()


def test_the_port_is_given_up_once_every_process_is_ready() -> None:
    async def scenario() -> float:
        children = [_Started(), _Started()]
        stopped = asyncio.Event()

        async def stop() -> None:
            stopped.set()

        task = asyncio.create_task(loading.stop_once_served(children, stop))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        assert not stopped.is_set()  # not started yet
        for child in children:
            child.process = object()
            child.ready.set()
        begun = asyncio.get_running_loop().time()
        await asyncio.wait_for(task, 2)
        return asyncio.get_running_loop().time() - begun

    assert asyncio.run(scenario()) < 1.0


def test_a_process_never_ready_gives_the_port_up_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loading, "SERVED_GRACE_SECONDS", 0.2)

    async def scenario() -> None:
        child = _Started()
        child.process = object()  # started, its model failed: never ready
        stopped = asyncio.Event()

        async def stop() -> None:
            stopped.set()

        await asyncio.wait_for(loading.stop_once_served([child], stop), 2)  # type: ignore[list-item]
        assert stopped.is_set()

    asyncio.run(scenario())
