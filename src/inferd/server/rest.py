"""The V2 REST API (Starlette): health, metadata, inference, model repository."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from ..dataplane import DataPlane
from ..errors import InferdError
from ..settings import ServerSettings
from ..stats import HttpStats
from .bodies import BodyReader
from .codec_rest import HEADER_LENGTH, JSON_CONTENT_TYPE, decode_index_request, error_body
from .docs import DocsEndpoints
from .fastpath import (
    GZIP_LEVEL,
    GZIP_MINIMUM_SIZE,
    INTERNAL_ERROR,
    FastInferApp,
    error_headers,
    infer_response,
)

logger = logging.getLogger(__name__)

CLIENT_CLOSED_REQUEST = 499

Endpoint = Callable[[Request], Awaitable[Response]]


def json_response(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status, media_type=JSON_CONTENT_TYPE)


def error_response(error: InferdError) -> Response:
    return Response(
        error_body(error.message),
        error.code.http_status,
        headers=dict(error_headers(error)),
        media_type=JSON_CONTENT_TYPE,
    )


def _handles_errors(endpoint: Endpoint) -> Endpoint:
    """Turn core errors into ``{"error": ...}`` answers; never leak a traceback."""

    async def wrapper(request: Request) -> Response:
        try:
            return await endpoint(request)
        except InferdError as error:
            return error_response(error)
        except (ConnectionAbortedError, ClientDisconnect):  # ours, and Starlette's stream()
            # Nobody reads this; 499 (nginx's "client closed request") marks it in metrics.
            return Response(error_body("The client disconnected"), CLIENT_CLOSED_REQUEST)
        except Exception:
            logger.exception("Unexpected error serving %s %s", request.method, request.url.path)
            return Response(
                error_body(INTERNAL_ERROR.message),
                500,
                media_type=JSON_CONTENT_TYPE,
            )

    return wrapper


class RestEndpoints:
    """The route handlers, bound to one DataPlane."""

    def __init__(self, dataplane: DataPlane, settings: ServerSettings) -> None:
        self.dataplane = dataplane
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

    async def infer(self, request: Request) -> Response:
        """Inference through Starlette: taken by requests the fast path passes on."""
        name, version = _model_path(request)
        body = await self.read_body(request)
        content, headers = await infer_response(
            self.dataplane, name, version, body, request.headers.get(HEADER_LENGTH), request.receive
        )
        response = Response(content)
        response.raw_headers.extend(headers)
        return response

    async def model_statistics(self, request: Request) -> Response:
        """Triton's statistics extension: every model, one model, or one version."""
        params = request.path_params
        found = self.dataplane.statistics(params.get("name"), params.get("version"))
        return json_response({"model_stats": [stats.to_dict() for stats in found]})

    async def repository_index(self, request: Request) -> Response:
        ready = decode_index_request(await self.read_body(request))
        return json_response([entry.to_dict() for entry in self.dataplane.index(ready)])

    async def repository_load(self, request: Request) -> Response:
        await self.dataplane.load(request.path_params["name"])
        return json_response({})

    async def repository_unload(self, request: Request) -> Response:
        await self.dataplane.unload(request.path_params["name"])
        return json_response({})

    def routes(self) -> list[Route]:
        def route(path: str, endpoint: Endpoint, method: str) -> Route:
            return Route(path, _handles_errors(endpoint), methods=[method])

        model_routes = []
        for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
            model_routes += [
                route(prefix, self.model_metadata, "GET"),
                route(f"{prefix}/ready", self.model_ready, "GET"),
                route(f"{prefix}/infer", self.infer, "POST"),
                route(f"{prefix}/stats", self.model_statistics, "GET"),
            ]
        return [
            route("/v2/health/live", self.live, "GET"),
            route("/v2/health/ready", self.ready, "GET"),
            route("/v2", self.server_metadata, "GET"),
            # Before /v2/models/{name}, which would take it for a model called "stats".
            route("/v2/models/stats", self.model_statistics, "GET"),
            *model_routes,
            route("/v2/repository/index", self.repository_index, "POST"),
            route("/v2/repository/models/{name}/load", self.repository_load, "POST"),
            route("/v2/repository/models/{name}/unload", self.repository_unload, "POST"),
            *(route(path, page, "GET") for path, page in DocsEndpoints(self.dataplane).endpoints()),
        ]


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


def build_rest_app(
    dataplane: DataPlane, settings: ServerSettings, http_stats: HttpStats | None = None
) -> FastInferApp:
    """The REST app; with ``http_stats`` it records every request there (metrics)."""
    middleware = []
    if settings.cors_settings is not None:
        cors = settings.cors_settings
        middleware.append(
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
        )
    if settings.gzip_enabled:
        middleware.append(
            Middleware(GZipMiddleware, minimum_size=GZIP_MINIMUM_SIZE, compresslevel=GZIP_LEVEL)
        )
    endpoints = RestEndpoints(dataplane, settings)
    app = Starlette(
        routes=endpoints.routes(),
        middleware=middleware,
        exception_handlers={404: _not_found, 405: _method_not_allowed},
    )
    return FastInferApp(app, dataplane, endpoints.body_reader, settings.gzip_enabled, http_stats)
