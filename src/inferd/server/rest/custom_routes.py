"""REST routes that runtimes serve themselves (MLServer's ``@custom_handler``).

A loaded runtime lists its routes (``LoadedInstance.custom_routes``); a request
that no route of the V2 API matches is looked up among those of the ready
models, and sent to the model's instance as a handler call (custom_calls.py):
it runs where the model lives, in a worker process too, after the model's queue
like any request. Unmatched requests get the usual 404.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.custom_calls import HandlerCall, handler_request, read_handler_response
from inferd.server.rest.fastpath import ASGIApp, Receive, Scope, Send, send_error, send_whole
from inferd.serving.runtime_headers import header_dict

if TYPE_CHECKING:
    from inferd.server.rest.edge import RestEdge

# (method, path) -> (model name, version, handler)
Target = tuple[str, str | None, str]


class CustomRoutes:
    """The router's default app: a runtime's route, else ``fallback`` (the 404).

    Through the REST edge (server/rest/edge.py), as /infer: these routes run the
    model, so the inference group's guard admits them."""

    def __init__(self, edge: RestEdge, fallback: ASGIApp) -> None:
        self.edge = edge
        self.dataplane = edge.dataplane
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = self.find(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if target is None:
            await self.fallback(scope, receive, send)
            return
        name, version, handler = target
        edge = self.edge
        try:
            headers = dict(scope["headers"])
            edge.admit(headers)
            body = await edge.read_body(headers, receive)
            query = scope.get("query_string", b"").decode("latin-1")
            context = edge.context(name, version, headers, receive)
            call = HandlerCall(handler, body, query, header_dict(context.headers))
            response = await self.dataplane.infer(name, version, handler_request(call), context)
            edge.traced(context, response)
            status, media_type, content = read_handler_response(response)
        except Exception as error:
            await send_error(send, error, f"route {scope['path']} of model {name!r}")
            return
        answer = edge.response_headers(context, [(b"content-type", media_type.encode("latin-1"))])
        await send_whole(send, status, answer, content)

    def find(self, method: str, path: str) -> Target | None:
        """The ready model version serving ``method path``, if one does."""
        return self.dataplane.custom_route(method, path)
