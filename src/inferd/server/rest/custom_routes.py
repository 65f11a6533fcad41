"""REST routes that runtimes serve themselves (MLServer's ``@custom_handler``).

A loaded runtime lists its routes (``LoadedInstance.custom_routes``); a request
that no route of the V2 API matches is looked up among those of the ready
models, and sent to the model's instance as a handler call (custom_calls.py):
it runs where the model lives, in a worker process too, after the model's queue
like any request. Unmatched requests get the usual 404.
"""

from __future__ import annotations

from inferd.context import RequestContext
from inferd.custom_calls import HandlerCall, handler_request, read_handler_response
from inferd.server.access import ApiGuard
from inferd.server.rest.bodies import BodyReader
from inferd.server.rest.fastpath import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    body_headers,
    receive_chunks,
    send_error,
    send_whole,
)
from inferd.serving.dataplane import DataPlane
from inferd.serving.runtime_headers import header_dict
from inferd.types import ModelState

# (method, path) -> (model name, version, handler)
Target = tuple[str, str | None, str]


class CustomRoutes:
    """The router's default app: a runtime's route, else ``fallback`` (the 404)."""

    def __init__(
        self,
        dataplane: DataPlane,
        body_reader: BodyReader,
        fallback: ASGIApp,
        guard: ApiGuard | None = None,
    ) -> None:
        self.dataplane = dataplane
        self.body_reader = body_reader
        self.fallback = fallback
        self.guard = guard  # the inference API group's: these routes run the model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = self.find(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if target is None:
            await self.fallback(scope, receive, send)
            return
        name, version, handler = target
        try:
            headers = dict(scope["headers"])
            if self.guard is not None:
                self.guard.check_headers(headers)
            body = await self.body_reader.read(receive_chunks(receive), body_headers(headers))
            query = scope.get("query_string", b"").decode("latin-1")
            call = HandlerCall(handler, body, query, header_dict(headers))
            context = RequestContext(headers=headers)
            response = await self.dataplane.infer(name, version, handler_request(call), context)
            status, media_type, content = read_handler_response(response)
        except Exception as error:
            await send_error(send, error, f"route {scope['path']} of model {name!r}")
            return
        answer = [(b"content-type", media_type.encode("latin-1"))]
        for key, value in (context.response_headers or {}).items():
            answer.append((key.encode("latin-1"), value.encode("latin-1")))
        await send_whole(send, status, answer, content)

    def find(self, method: str, path: str) -> Target | None:
        """The ready model version serving ``method path``, if one does."""
        for found in self.dataplane.registry.versions():
            instance = found.instance
            if found.state is not ModelState.READY or instance is None:
                continue
            for route_method, route_path, handler in instance.custom_routes:
                if route_path == path and route_method == method:
                    return found.name, found.version, handler
        return None
