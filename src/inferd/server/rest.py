"""The V2 REST API (Starlette): health, metadata, inference, model repository."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..dataplane import DataPlane
from ..errors import InferdError, InvalidRequest, Overloaded, PayloadTooLarge
from ..settings import ServerSettings
from .codec_rest import (
    BINARY_CONTENT_TYPE,
    HEADER_LENGTH,
    JSON_CONTENT_TYPE,
    decode_index_request,
    decode_infer_request,
    encode_infer_response,
    error_body,
)

logger = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


def json_response(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status, media_type=JSON_CONTENT_TYPE)


def error_response(error: InferdError) -> Response:
    headers = None
    if isinstance(error, Overloaded):
        headers = {"Retry-After": str(max(1, round(error.retry_after)))}
    return Response(
        error_body(error.message),
        error.code.http_status,
        headers=headers,
        media_type=JSON_CONTENT_TYPE,
    )


def _handles_errors(endpoint: Endpoint) -> Endpoint:
    """Turn core errors into ``{"error": ...}`` answers; never leak a traceback."""

    async def wrapper(request: Request) -> Response:
        try:
            return await endpoint(request)
        except InferdError as error:
            return error_response(error)
        except Exception:
            logger.exception("Unexpected error serving %s %s", request.method, request.url.path)
            return Response(
                error_body("Internal server error; see the server logs"),
                500,
                media_type=JSON_CONTENT_TYPE,
            )

    return wrapper


class RestEndpoints:
    """The route handlers, bound to one DataPlane."""

    def __init__(self, dataplane: DataPlane, settings: ServerSettings) -> None:
        self.dataplane = dataplane
        self.max_body = settings.max_request_size

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
        name, version = _model_path(request)
        body = await read_body(request, self.max_body)
        inference_request = decode_infer_request(body, request.headers.get(HEADER_LENGTH))
        response = await self.dataplane.infer(name, version, inference_request)
        content, header_length = encode_infer_response(response, inference_request)
        if header_length is None:
            return Response(content, media_type=JSON_CONTENT_TYPE)
        return Response(
            content,
            media_type=BINARY_CONTENT_TYPE,
            headers={"Inference-Header-Content-Length": str(header_length)},
        )

    async def repository_index(self, request: Request) -> Response:
        ready = decode_index_request(await read_body(request, self.max_body))
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
            ]
        return [
            route("/v2/health/live", self.live, "GET"),
            route("/v2/health/ready", self.ready, "GET"),
            route("/v2", self.server_metadata, "GET"),
            *model_routes,
            route("/v2/repository/index", self.repository_index, "POST"),
            route("/v2/repository/models/{name}/load", self.repository_load, "POST"),
            route("/v2/repository/models/{name}/unload", self.repository_unload, "POST"),
        ]


def _model_path(request: Request) -> tuple[str, str | None]:
    params = request.path_params
    return params["name"], params.get("version")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, gunzipped if needed; PayloadTooLarge past ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(_too_large(limit))
    if declared is not None:
        body = await request.body()
    else:
        body = await _read_stream(request, limit)
    if len(body) > limit:
        raise PayloadTooLarge(_too_large(limit))
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    return _decompress(body, encoding, limit)


async def _read_stream(request: Request, limit: int) -> bytes:
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(_too_large(limit))
        chunks.append(chunk)
    return b"".join(chunks)


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """gzip or deflate, refusing to inflate past ``limit`` (a zip bomb guard)."""
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        raise InvalidRequest(f"Unsupported Content-Encoding {encoding!r}; use gzip or deflate")
    inflater = zlib.decompressobj(wbits)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as error:
        raise InvalidRequest(f"The body is not valid {encoding} data: {error}") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise PayloadTooLarge(_too_large(limit) + " once decompressed")
    if not inflater.eof:
        raise InvalidRequest(f"The body is truncated {encoding} data")
    return data


def _too_large(limit: int) -> str:
    return f"The request body is larger than max_request_size ({limit} bytes)"


async def _not_found(request: Request, exc: Exception) -> Response:
    return Response(
        error_body(f"No route for {request.method} {request.url.path}"),
        404,
        media_type=JSON_CONTENT_TYPE,
    )


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    return Response(
        error_body(f"Method {request.method} is not allowed on {request.url.path}"),
        405,
        media_type=JSON_CONTENT_TYPE,
    )


def build_rest_app(dataplane: DataPlane, settings: ServerSettings) -> Starlette:
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
        middleware.append(Middleware(GZipMiddleware, minimum_size=1024))
    return Starlette(
        routes=RestEndpoints(dataplane, settings).routes(),
        middleware=middleware,
        exception_handlers={404: _not_found, 405: _method_not_allowed},
    )
