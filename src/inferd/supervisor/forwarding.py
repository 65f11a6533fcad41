"""A protocol process's side of the coordinator (coordinator.py).

- :class:`ForwardingServerWide`: what the edges of a protocol process are given
  as their :class:`~inferd.serving.server_wide.ServerWide` (``InferenceServer.server_wide``):
  each operation goes to the coordinator as the REST call the public API has for
  it, and the coordinator's answer comes back as the local operation's would:
  its value, or an error with the same status (REST) and the nearest code (gRPC),
  which is the one the local error has (errors.StatusError).
- What the process serves on its ``rest-<i>.sock``, where the coordinator sends
  every process the same call, is ``server/protocol_role.py``'s ``private_rest_app``.
- :func:`catch_up`: a process that starts (or restarts) has the coordinator replay
  its journal to it. Call it once ``rest-<i>.sock`` serves and the start-up models
  are loaded (the journal may unload one of them), before serving the public ports.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from inferd.errors import ErrorCode, InferdError, StatusError
from inferd.serving.server_wide import EVICT, LOAD_ON_REQUEST, ServerWide
from inferd.supervisor.coordinator import CATCH_UP_PREFIX, LOADED_PREFIX, SWITCH_PREFIX
from inferd.supervisor.fanout import Answer, send
from inferd.supervisor.journal import LOGGING_PATH
from inferd.supervisor.paths import ProtocolRole
from inferd.triton.shm import CUDA, SYSTEM

logger = logging.getLogger(__name__)

_JSON_HEADERS = {"content-type": "application/json"}
_SHM_PREFIX = {SYSTEM: "/v2/systemsharedmemory", CUDA: "/v2/cudasharedmemory"}


class CoordinatorUnreachable(InferdError, code=ErrorCode.UNAVAILABLE):
    """The supervisor's coordinator did not answer (the server is stopping)."""


class ForwardingServerWide(ServerWide):
    """Server-wide operations sent to the coordinator at ``coordinator`` (its socket)."""

    def __init__(self, coordinator: Path) -> None:
        self.coordinator = coordinator

    async def load(self, name: str, config: str | None) -> None:
        body = {"parameters": {"config": config}} if config is not None else {}
        await self._call("POST", f"/v2/repository/models/{_quoted(name)}/load", body)

    async def load_on_request(self, name: str, evict: str | None = None) -> None:
        body = {"parameters": {LOAD_ON_REQUEST: True, EVICT: evict}}
        await self._call("POST", f"/v2/repository/models/{_quoted(name)}/load", body)

    async def unload(self, name: str) -> None:
        await self._call("POST", f"/v2/repository/models/{_quoted(name)}/unload")

    async def change_log_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        settings: dict[str, Any] = orjson.loads(await self._call("POST", LOGGING_PATH, changes))
        return settings

    async def register_system_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        body = {"key": key, "offset": offset, "byte_size": byte_size}
        await self._call("POST", f"{_region(SYSTEM, name)}/register", body)

    async def register_cuda_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        handle = {"b64": base64.b64encode(raw_handle).decode("ascii")}
        body = {"raw_handle": handle, "device_id": device_id, "byte_size": byte_size}
        await self._call("POST", f"{_region(CUDA, name)}/register", body)

    async def unregister_memory(self, name: str | None, kind: str) -> None:
        where = _region(kind, name) if name else _SHM_PREFIX[kind]
        await self._call("POST", f"{where}/unregister")

    async def statistics(self, name: str | None, version: str | None) -> list[dict[str, Any]]:
        path = "/v2/models/stats"
        if name:
            path = f"/v2/models/{_quoted(name)}"
            path += f"/versions/{_quoted(version)}/stats" if version else "/stats"
        stats: list[dict[str, Any]] = orjson.loads(await self._call("GET", path))["model_stats"]
        return stats

    async def _call(self, method: str, path: str, body: Any = None) -> bytes:
        return await call_coordinator(self.coordinator, method, path, body)


async def call_coordinator(coordinator: Path, method: str, path: str, body: Any = None) -> bytes:
    """The body of the coordinator's answer to ``method path`` (``body`` as JSON); the
    error it stands for if not a success."""
    content = orjson.dumps(body) if body is not None else None
    answer = await send(coordinator, method, path, content, _JSON_HEADERS)
    if not answer.ok:
        raise answered_error(f"{method} {path}", answer)
    return answer.body


def answered_error(call: str, answer: Answer) -> InferdError:
    """The error a refused (or unanswered) call to the coordinator stands for."""
    if not answer.status:
        return CoordinatorUnreachable(
            f"{call} could not reach the coordinator of the protocol processes: {answer.error}"
        )
    error = StatusError(_message(answer.body), answer.status)
    retry_after = answer.headers.get("retry-after")
    if retry_after and retry_after.isdigit():
        error.retry_after = float(retry_after)
    return error


def _message(body: bytes) -> str:
    """The ``error`` of a JSON error body (every one inferd answers), else the body."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        return parsed["error"]
    return body.decode("utf-8", "replace")


def _quoted(name: str) -> str:
    return quote(name, safe="")


def _region(kind: str, name: str) -> str:
    return f"{_SHM_PREFIX[kind]}/region/{_quoted(name)}"


async def catch_up(role: ProtocolRole) -> dict[str, Any]:
    """Have the coordinator replay its journal to this process (``role``): how many
    calls it applied and the ones it refused (the coordinator logs them);
    CoordinatorUnreachable if it does not answer."""
    path = f"{CATCH_UP_PREFIX}/{role.index}"
    outcome: dict[str, Any] = orjson.loads(
        await call_coordinator(role.paths.coordinator, "POST", path)
    )
    return outcome


async def wait_for_every_process(role: ProtocolRole) -> None:
    """Tell the coordinator this process has loaded its start-up models, and return
    once every protocol process has (CoordinatorUnreachable if it does not answer)."""
    await call_coordinator(role.paths.coordinator, "POST", f"{LOADED_PREFIX}/{role.index}")


async def switch_together(role: ProtocolRole, barrier: str) -> None:
    """Return once every protocol process has loaded what the repository reload of
    switch ``barrier`` brings (the coordinator's barrier), so they serve it together.
    A coordinator that cannot say so (the server is stopping) does not hold the new
    version back: it serves now."""
    path = f"{SWITCH_PREFIX}/{barrier}/{role.index}"
    try:
        await call_coordinator(role.paths.coordinator, "POST", path)
    except InferdError as error:
        logger.warning("Serving a repository change without the others: %s", error.message)
