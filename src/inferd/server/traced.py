"""The servers' request spans: an ASGI app around the REST app, a gRPC interceptor.

Both exist only when tracing is on (the server wraps its REST app and adds the
interceptor then), so a server without tracing runs neither: its requests pay
nothing for it. Each opens its request's span as it arrives (a child of the
caller's, given a ``traceparent``), makes it current while the request is
answered (where the inference endpoints find it, observability/tracing.py), and closes it with
the status answered. The spans themselves are :mod:`inferd.observability.tracing`'s.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from starlette.routing import compile_path

from inferd.server.grpc.registration import SERVICE
from inferd.server.rest.fastpath import ASGIApp, Message, Receive, Scope, Send, route_path
from inferd.server.routes import INFER_ROUTES

if TYPE_CHECKING:
    from inferd.observability.tracing import ServerSpan, Tracing

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]
_METHOD_PREFIX = f"/{SERVICE.full_name}/"


class TracedApp:
    """The REST app, with a span for each HTTP request it answers."""

    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing
        # The fast path's routes, which Starlette does not see to name (scope["route"]).
        self._infer_routes: tuple[tuple[re.Pattern[str], str], ...] = tuple(
            (compile_path(route.path)[0], route.path) for route in INFER_ROUTES
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        opened = self.tracing.http_span(scope) if scope["type"] == "http" else None
        if opened is None:
            await self.app(scope, receive, send)
            return
        status = 0

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            self.tracing.end_http(opened, self._route(scope), status)

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


class TracingInterceptor(grpc.aio.ServerInterceptor):
    """A span for each call of the inference service (not health, not reflection)."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        full_name = handler_call_details.method
        if handler is None or not full_name.startswith(_METHOD_PREFIX):
            return handler
        method = full_name.removeprefix(_METHOD_PREFIX)
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                self._traced_stream(method, handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.request_streaming or handler.response_streaming:
            return handler  # the service has no such method
        return grpc.unary_unary_rpc_method_handler(
            self._traced_unary(method, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _traced_unary(self, method: str, answer: Any) -> Any:
        tracing = self.tracing

        async def traced(request: Any, context: grpc.aio.ServicerContext) -> Any:
            opened = tracing.grpc_span(method, context)
            if opened is None:
                return await answer(request, context)
            code = grpc.StatusCode.OK
            try:
                return await answer(request, context)
            except BaseException as error:
                code = _code_of(error, context)
                raise
            finally:
                tracing.end_grpc(opened, code)

        return traced

    def _traced_stream(self, method: str, answer: Any) -> Any:
        tracing = self.tracing

        async def traced(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            # Not made current: a generator may be resumed in another context.
            opened: ServerSpan | None = tracing.grpc_span(method, context, current=False)
            code = grpc.StatusCode.OK
            try:
                async for response in answer(requests, context):
                    yield response
            except BaseException as error:
                code = _code_of(error, context)
                raise
            finally:
                if opened is not None:
                    tracing.end_grpc(opened, code)

        return traced


def _code_of(error: BaseException, context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """The status a call that raised ``error`` ends with."""
    if isinstance(error, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    if isinstance(error, grpc.aio.AbortError):
        code = context.code()  # what the method aborted with
        if isinstance(code, grpc.StatusCode):
            return code
    return grpc.StatusCode.UNKNOWN
