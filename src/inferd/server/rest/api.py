"""The V2 REST API (Starlette): health, metadata, statistics, model repository, docs.

Its routes are routes.API_ROUTES. Inference is answered by fastpath.InferEndpoint,
which RestApp calls before Starlette; Starlette reaches it only for CORS requests.
Streaming and generate routes are answered by the endpoints of server/rest/streaming.py.
All of them, and runtimes' own routes, reach the core through the REST edge
(server/rest/edge.py), which also holds every API group's guard.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferd.observability.stats import HttpStats
from inferd.server.access import ApiGuard, GuardedRoute, api_guards
from inferd.server.codec_triton import decode_load_request, decode_log_settings
from inferd.server.docs.pages import DocsEndpoints
from inferd.server.errors import http_error
from inferd.server.openai.endpoints import OpenAIEndpoints
from inferd.server.rest.bodies import BodyReader
from inferd.server.rest.codec import JSON_CONTENT_TYPE, decode_index_request, error_body
from inferd.server.rest.custom_routes import CustomRoutes
from inferd.server.rest.edge import RestEdge
from inferd.server.rest.fastpath import InferEndpoint, RestApp
from inferd.server.rest.streaming import stream_endpoints
from inferd.server.routes import API_ROUTES
from inferd.server.shm_api import SharedMemoryEndpoints
from inferd.server.trace_api import TraceEndpoints
from inferd.serving import dependents
from inferd.serving.dataplane import DataPlane
from inferd.serving.server_wide import LocalServerWide, ServerWide
from inferd.serving.shared_memory import SharedMemoryOperations
from inferd.settings import ServerSettings

if TYPE_CHECKING:
    from inferd.observability.tracing import Tracing

Endpoint = Callable[[Request], Awaitable[Response]]


def json_response(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status, media_type=JSON_CONTENT_TYPE)


def _handles_errors(endpoint: Endpoint) -> Endpoint:
    """Answer what the endpoint raises through http_error; never leak a traceback."""

    async def wrapper(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as error:
            serving = f"{request.method} {request.url.path}"
            status, body, headers = http_error(error, serving)
            response = Response(body, status)
            response.raw_headers.extend(headers)
            return response

    return wrapper


class RestEndpoints:
    """The route handlers, bound to one DataPlane; what holds server-wide (loads,
    unloads, log changes, statistics) goes through ``server_wide``."""

    def __init__(
        self, dataplane: DataPlane, server_wide: ServerWide, settings: ServerSettings
    ) -> None:
        self.dataplane = dataplane
        self.server_wide = server_wide
        self.body_reader = BodyReader(settings.max_request_size)

    async def read_body(self, request: Request) -> bytes:
        return await self.body_reader.read(request.stream(), request.headers)

    async def live(self, request: Request) -> Response:
        live = self.dataplane.live()
        return json_response({"live": live}, 200 if live else 503)

    async def ready(self, request: Request) -> Response:
        ready = self.dataplane.ready()
        return json_response({"ready": ready}, 200 if ready else 503)

    async def model_ready(self, request: Request) -> Response:
        name, version = _model_path(request)
        ready = self.dataplane.model_ready(name, version)
        return json_response({"name": name, "ready": ready}, 200 if ready else 503)

    async def server_metadata(self, request: Request) -> Response:
        return json_response(self.dataplane.server_metadata().to_dict())

    async def model_metadata(self, request: Request) -> Response:
        name, version = _model_path(request)
        return json_response(self.dataplane.model_metadata(name, version).to_dict())

    async def model_statistics(self, request: Request) -> Response:
        """Triton's statistics extension: every model, one model, or one version."""
        params = request.path_params
        found = await self.server_wide.statistics(params.get("name"), params.get("version"))
        return json_response({"model_stats": found})

    async def repository_index(self, request: Request) -> Response:
        ready = decode_index_request(await self.read_body(request))
        return json_response([entry.to_dict() for entry in self.dataplane.index(ready)])

    async def repository_load(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await self.read_body(request)
        await self.server_wide.load(name, decode_load_request(name, body))
        return json_response({})

    # Triton's model configuration and logging extensions

    async def model_config(self, request: Request) -> Response:
        name, version = _model_path(request)
        return json_response(self.dataplane.model_config(name, version))

    async def log_settings(self, request: Request) -> Response:
        return json_response(self.dataplane.log_settings())

    async def update_log_settings(self, request: Request) -> Response:
        changes = decode_log_settings(await self.read_body(request))
        if not changes:  # nothing to change: a read, answered here
            return json_response(self.dataplane.log_settings())
        return json_response(await self.server_wide.change_log_settings(changes))

    async def repository_unload(self, request: Request) -> Response:
        registry = self.dataplane.registry
        name, body = request.path_params["name"], await self.read_body(request)
        await dependents.unload(self.server_wide, registry, name, _unload_dependents(body))
        return json_response({})


def _unload_dependents(body: bytes) -> bool:
    """Whether an unload's body asks for Triton's ``unload_dependents`` (its only
    parameter; a body that is not JSON asks for nothing, as before it was read)."""
    try:
        parameters = orjson.loads(body or b"{}").get("parameters")
    except (orjson.JSONDecodeError, AttributeError):
        return False
    return isinstance(parameters, dict) and parameters.get(dependents.UNLOAD_DEPENDENTS) is True


def _model_path(request: Request) -> tuple[str, str | None]:
    params = request.path_params
    return params["name"], params.get("version")


async def _not_found(request: Request, exc: Exception) -> Response:
    return Response(
        error_body(f"No route for {request.method} {request.url.path}"),
        404,
        media_type=JSON_CONTENT_TYPE,
    )


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    # Starlette's Allow lists the route's methods from a set: sort them so the
    # header is the same on every run.
    allowed = getattr(exc, "headers", None) or {}
    methods = sorted(method.strip() for method in allowed.get("Allow", "").split(",") if method)
    return Response(
        error_body(f"Method {request.method} is not allowed on {request.url.path}"),
        405,
        headers={"Allow": ", ".join(methods)} if methods else None,
        media_type=JSON_CONTENT_TYPE,
    )


def _routes(
    endpoints: RestEndpoints, docs: DocsEndpoints, infer: InferEndpoint, edge: RestEdge
) -> list[Route]:
    """Starlette's routes: routes.API_ROUTES, each answered by the handler it names,
    behind its API group's guard if it has one (the edge's)."""
    # ASGI apps that run models, which answer their own errors and go through the edge.
    asgi_endpoints: dict[str, Any] = {
        "infer": infer,
        **stream_endpoints(edge, infer),
        **OpenAIEndpoints(edge).endpoints(),
    }
    shared_memory = SharedMemoryEndpoints(
        SharedMemoryOperations(endpoints.dataplane, endpoints.server_wide), endpoints.read_body
    )
    trace = TraceEndpoints(endpoints.dataplane, endpoints.server_wide, endpoints.read_body)
    routes = []
    for route in API_ROUTES:
        endpoint = asgi_endpoints.get(route.handler)
        if endpoint is None:
            handler = (
                getattr(endpoints, route.handler, None)
                or getattr(shared_memory, route.handler, None)
                or getattr(trace, route.handler, None)
                or getattr(docs, route.handler)
            )
            endpoint = _handles_errors(handler)
        guard = edge.guard(route.api)
        middleware = None
        # InferEndpoint has the edge admit it: the fast path reaches it without Starlette;
        # the OpenAI endpoints check access themselves (a Bearer key, OpenAI's errors).
        if guard is not None and endpoint is not infer and not hasattr(endpoint, "checks_access"):
            middleware = [Middleware(GuardedRoute, guard=guard)]
        routes.append(
            Route(
                route.path,
                endpoint,
                methods=[route.method],
                name=route.operation_id,
                middleware=middleware,
            )
        )
    return routes


def _cors(settings: ServerSettings) -> list[Middleware]:
    cors = settings.cors_settings
    if cors is None:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=cors.allow_origins,
            allow_origin_regex=cors.allow_origin_regex,
            allow_credentials=cors.allow_credentials,
            allow_methods=cors.allow_methods,
            allow_headers=cors.allow_headers,
            expose_headers=cors.expose_headers,
            max_age=cors.max_age,
        )
    ]


def build_rest_app(
    dataplane: DataPlane,
    settings: ServerSettings,
    http_stats: HttpStats | None = None,
    guards: dict[str, ApiGuard] | None = None,
    tracing: Tracing | None = None,
    server_wide: ServerWide | None = None,
) -> RestApp:
    """The REST app; with ``http_stats`` it records every request there (metrics).

    ``guards``: the API groups' guards (default: as the settings say, access.py).
    ``tracing``: the inference endpoint notes its model work for the request's span
    (which server/traced.py's TracedApp, around this app, opens).
    ``server_wide``: where server-wide operations go (default: applied to ``dataplane``
    alone, serving/server_wide.py)."""
    if guards is None:
        guards = api_guards(settings)
    if server_wide is None:
        server_wide = LocalServerWide(dataplane)
    endpoints = RestEndpoints(dataplane, server_wide, settings)
    edge = RestEdge(dataplane, endpoints.body_reader, guards, tracing)
    infer = InferEndpoint(edge, compress=settings.gzip_enabled)
    app = Starlette(
        routes=_routes(endpoints, DocsEndpoints(dataplane), infer, edge),
        middleware=_cors(settings),
        exception_handlers={404: _not_found, 405: _method_not_allowed},
    )
    # Paths no V2 route matches may be a runtime's own (MLServer's custom handlers).
    app.router.default = CustomRoutes(edge, app.router.default)
    return RestApp(
        app,
        infer,
        cors_enabled=settings.cors_settings is not None,
        http_stats=http_stats,
    )
