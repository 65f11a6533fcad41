"""Triton's trace extension over REST and gRPC: read and change the trace settings.

``GET|POST /v2/trace/setting`` and ``/v2/models/{name}/trace/setting`` (REST), and
gRPC ``TraceSetting`` (settings to change, or none to read; ``model_name`` empty
for the server's). A change is checked here (observability/trace_settings.py, in
Triton's words), then applied server-wide through the edge's
:class:`~inferd.serving.server_wide.ServerWide` (every protocol process traces by
the same settings); a read answers from the process asked. A model's settings
need the model ready, as Triton's do (else 400 ``Request for unknown model``).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from inferd.errors import InferdError, InvalidRequest
from inferd.observability.trace_settings import SERVER, parse_changes
from inferd.protocol import pb
from inferd.server.rest.codec import JSON_CONTENT_TYPE
from inferd.serving.dataplane import DataPlane
from inferd.serving.server_wide import ServerWide


def _ready_model(dataplane: DataPlane, name: str) -> str:
    """``name`` when it names a ready model; SERVER for none; else Triton's 400."""
    if not name:
        return SERVER
    try:
        ready = dataplane.model_ready(name)
    except InferdError:
        ready = False
    if not ready:
        raise InvalidRequest(f"Request for unknown model : {name} (no ready model of that name)")
    return name


async def _settings(
    dataplane: DataPlane, server_wide: ServerWide, model: str, raw: dict[str, Any]
) -> dict[str, Any]:
    """The settings in force after ``raw``'s changes (none: a read, answered here)."""
    changes = parse_changes(raw)
    if not changes:
        return dataplane.trace_settings.answer(model)
    return await server_wide.change_trace_settings(model, changes)


class TraceEndpoints:
    """The REST handlers (routes.py names them)."""

    def __init__(self, dataplane: DataPlane, server_wide: ServerWide, read_body: Any) -> None:
        self.dataplane = dataplane
        self.server_wide = server_wide
        self.read_body = read_body

    async def trace_settings(self, request: Request) -> Response:
        model = _ready_model(self.dataplane, request.path_params.get("name", ""))
        return _json(self.dataplane.trace_settings.answer(model))

    async def update_trace_settings(self, request: Request) -> Response:
        model = _ready_model(self.dataplane, request.path_params.get("name", ""))
        raw = _decoded(await self.read_body(request))
        return _json(await _settings(self.dataplane, self.server_wide, model, raw))


def _decoded(body: bytes) -> dict[str, Any]:
    """A trace settings request's JSON object (an empty body: no change)."""
    if not body.strip():
        return {}
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise InvalidRequest(f"The trace settings are not valid JSON: {error}") from None
    if not isinstance(raw, dict):
        raise InvalidRequest("The trace settings must be a JSON object")
    return raw


def _json(content: Any) -> Response:
    return Response(orjson.dumps(content), 200, media_type=JSON_CONTENT_TYPE)


async def grpc_trace_setting(
    dataplane: DataPlane, server_wide: ServerWide, request: pb.TraceSettingRequest
) -> pb.TraceSettingResponse:
    """gRPC ``TraceSetting``: a setting sent with no value is cleared."""
    model = _ready_model(dataplane, request.model_name)
    raw = {key: list(value.value) or None for key, value in request.settings.items()}
    settings = await _settings(dataplane, server_wide, model, raw)
    answer = pb.TraceSettingResponse()
    for key, value in settings.items():
        answer.settings[key].value.extend(value if isinstance(value, list) else [value])
    return answer
