"""Restricted API groups over gRPC: each method's group, and the interceptor that checks.

:data:`METHOD_GROUPS` gives every method the server answers its API group, as
routes.API_ROUTES does for REST, and :class:`RestrictedMethods` each method's guard.
The V2 service's methods are checked by the gRPC edge (server/grpc/edge.py), which
every entry reaches, Ray's gRPC proxy included; the health and reflection services
by the interceptor. :func:`access_interceptors` is empty when no group has a guard,
so an unrestricted server runs no interceptor at all; else the interceptor looks up
a health or reflection call's guard and, if the call's metadata does not pass it,
answers PERMISSION_DENIED before the method runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection

from inferd.errors import PermissionDenied
from inferd.server.access import ApiGuard
from inferd.server.errors import grpc_error
from inferd.server.grpc.registration import SERVICE
from inferd.server.routes import (
    HEALTH,
    INFERENCE,
    LOGGING,
    METADATA,
    MODEL_CONFIG,
    MODEL_REPOSITORY,
    SHARED_MEMORY,
    STATISTICS,
    TRACE,
)

_INFERENCE_METHOD_GROUPS = {
    "ServerLive": HEALTH,
    "ServerReady": HEALTH,
    "ModelReady": HEALTH,
    "ServerMetadata": METADATA,
    "ModelMetadata": METADATA,
    "ModelInfer": INFERENCE,
    "ModelStreamInfer": INFERENCE,
    "ModelStatistics": STATISTICS,
    "RepositoryIndex": MODEL_REPOSITORY,
    "RepositoryModelLoad": MODEL_REPOSITORY,
    "RepositoryModelUnload": MODEL_REPOSITORY,
    **{
        f"{kind}SharedMemory{call}": SHARED_MEMORY
        for kind in ("System", "Cuda")
        for call in ("Status", "Register", "Unregister")
    },
    "ModelConfig": MODEL_CONFIG,
    "LogSettings": LOGGING,
    "TraceSetting": TRACE,
}
_HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"]

# The full name of every method served ("/package.Service/Method") and its API group.
METHOD_GROUPS: dict[str, str] = {
    **{
        f"/{SERVICE.full_name}/{method.name}": _INFERENCE_METHOD_GROUPS[method.name]
        for method in SERVICE.methods
    },
    **{f"/{_HEALTH_SERVICE.full_name}/{method.name}": HEALTH for method in _HEALTH_SERVICE.methods},
    # Reflection describes the services: metadata about the server.
    f"/{reflection.SERVICE_NAME}/ServerReflectionInfo": METADATA,
}

# The methods the gRPC edge checks itself (server/grpc/edge.py).
_EDGE_CHECKS = f"/{SERVICE.full_name}/"

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


class RestrictedMethods(grpc.aio.ServerInterceptor):
    """Each method's guard; as an interceptor, refuses the health and reflection calls
    of guarded API groups whose metadata the guard does not pass."""

    def __init__(self, guards: dict[str, ApiGuard]) -> None:
        self._guards = {
            method: guards[group] for method, group in METHOD_GROUPS.items() if group in guards
        }

    @property
    def guards(self) -> dict[str, ApiGuard]:
        """The guard of each guarded method, by its full name."""
        return self._guards

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if method.startswith(_EDGE_CHECKS):  # the V2 service: the gRPC edge checks it
            return handler
        guard = self._guards.get(method)
        if guard is None or handler is None:
            return handler
        try:
            guard.check_metadata(handler_call_details.invocation_metadata)
        except PermissionDenied as error:
            return _refusing(handler, error)
        return handler


def access_interceptors(guards: dict[str, ApiGuard]) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors that enforce ``guards`` on health and reflection: none when
    no group of theirs has one."""
    methods = RestrictedMethods(guards)
    checked_here = any(not method.startswith(_EDGE_CHECKS) for method in methods.guards)
    return [methods] if checked_here else []


def _refusing(handler: grpc.RpcMethodHandler, error: PermissionDenied) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that answers ``error`` at once."""
    code, message, _ = grpc_error(error, "")

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)
        yield  # an async generator, as a streaming handler must be

    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(
        refuse_stream if handler.response_streaming else refuse,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
