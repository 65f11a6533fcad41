"""Restricted API groups over gRPC: each method's group, and the interceptor that checks.

:data:`METHOD_GROUPS` gives every method the server answers its API group, as
routes.API_ROUTES does for REST. :func:`access_interceptors` is empty when no
group has a guard, so an unrestricted server runs no interceptor at all; else one
interceptor looks up the called method's guard and, if the call's metadata does
not pass it, answers PERMISSION_DENIED before the method runs.
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

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


class RestrictedMethods(grpc.aio.ServerInterceptor):
    """Refuses the calls of guarded API groups whose metadata the guard does not pass."""

    def __init__(self, guards: dict[str, ApiGuard]) -> None:
        self._guards = {
            method: guards[group] for method, group in METHOD_GROUPS.items() if group in guards
        }

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        guard = self._guards.get(handler_call_details.method)
        if guard is None or handler is None:
            return handler
        try:
            guard.check_metadata(handler_call_details.invocation_metadata)
        except PermissionDenied as error:
            return _refusing(handler, error)
        return handler


def access_interceptors(guards: dict[str, ApiGuard]) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors that enforce ``guards``: none when no group has one."""
    return [RestrictedMethods(guards)] if guards else []


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
