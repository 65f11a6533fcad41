"""The REST server's request spans: an ASGI app around the REST app.

It exists only when tracing is on (the server wraps its REST app then), so a
server without tracing runs none: its requests pay nothing for it. It opens each
HTTP request's span as it arrives (a child of the caller's, given a
``traceparent``), makes it current while the request is answered (where the REST
edge finds it, server/rest/edge.py), and closes it with the status answered. The
gRPC edge opens its calls' spans itself (server/grpc/edge.py). The spans themselves
are :mod:`inferd.observability.tracing`'s.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.routing import compile_path

from inferd.errors import ConfigurationError
from inferd.observability.trace_settings import TraceSettings
from inferd.server.rest.fastpath import ASGIApp, ObservedSend, Receive, Scope, Send, route_path
from inferd.server.routes import API_ROUTES, INFER_ROUTES, INFERENCE, MODEL_PREFIX
from inferd.settings import ServerSettings

if TYPE_CHECKING:
    from inferd.observability.tracing import Tracing


class TracedApp:
    """The REST app, with a span for each HTTP request it answers."""

    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing
        # The fast path's routes, which Starlette does not see to name (scope["route"]).
        self._infer_routes: tuple[tuple[re.Pattern[str], str], ...] = tuple(
            (compile_path(route.path)[0], route.path) for route in INFER_ROUTES
        )
        # The V2 inference routes: their model's trace settings decide their spans.
        self._model_routes = tuple(
            compile_path(route.path)[0]
            for route in API_ROUTES
            if route.api == INFERENCE and route.path.startswith(MODEL_PREFIX)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        opened = (
            self.tracing.http_span(scope, self._model(scope)) if scope["type"] == "http" else None
        )
        if opened is None:
            await self.app(scope, receive, send)
            return
        observed = ObservedSend(send)
        try:
            await self.app(scope, receive, observed)
        finally:
            self.tracing.end_http(opened, self._route(scope), observed.status)

    def _model(self, scope: Scope) -> str | None:
        """The model of a V2 inference request (None: not one)."""
        if scope.get("method") != "POST":
            return None
        path = route_path(scope)
        for pattern in self._model_routes:
            found = pattern.match(path)
            if found:
                return found.group("name")
        return None

    def _route(self, scope: Scope) -> str | None:
        """The template of the route the request matched (None: none did)."""
        route = getattr(scope.get("route"), "path", None)
        if route is not None:
            return str(route)
        path = route_path(scope)
        for pattern, template in self._infer_routes:
            if pattern.match(path):
                return template
        return None


def start_tracing(settings: ServerSettings, trace_settings: TraceSettings) -> Tracing | None:
    """The server's tracer when tracing is on (None: off, and OpenTelemetry is not
    even imported), tracing inference requests as ``trace_settings`` say."""
    if not settings.tracing_enabled:
        return None
    try:
        from inferd.observability.tracing import Tracing
    except ImportError as error:
        raise ConfigurationError(
            f"Tracing is on (tracing_server, or OTEL_EXPORTER_OTLP_ENDPOINT), but the "
            f"OpenTelemetry SDK cannot be imported ({error}): pip install 'inferd[tracing]'"
        ) from None
    return Tracing.start(settings, trace_settings=trace_settings)
