"""Registering the inference service so that malformed messages are the client's error.

grpcio deserializes each request before the servicer runs; with the generated
``add_GRPCInferenceServiceServicer_to_server`` a message that is not valid
protobuf fails inside grpcio, which answers UNKNOWN with a Python exception name
and logs a traceback. Here the deserializer hands the servicer a
:class:`MalformedMessage` instead, which it answers with INVALID_ARGUMENT (and,
inside a stream, with that request's ``error_message``).

Every service is served by generic handlers only, none as registered methods: grpcio's
asyncio server (1.75.1 and later, grpc/grpc issue 43092) waits for each call on one
future per registered method, so the ~22 methods of the V2, health and reflection
services cost every call more than the handler lookup they save (a dict lookup by the
method's name). Measured on ModelInfer under callgrind: 7% fewer instructions per call
registering none than registering all, ModelInfer alone registered the same as none
(benchmarks/README.md, "gRPC: the unary floor").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from inferd.errors import InvalidRequest
from inferd.protocol import pb

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]


@dataclass(frozen=True, slots=True)
class MalformedMessage:
    """What a request that protobuf could not parse becomes."""

    message_type: str
    reason: str

    def error(self) -> InvalidRequest:
        return InvalidRequest(
            f"The request is not a valid {self.message_type} message ({self.reason}); "
            "check that the client uses the Open Inference Protocol's inference.proto"
        )


def lenient_deserializer(message_class: type[Message]) -> Callable[[bytes], Any]:
    full_name = message_class.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Message | MalformedMessage:
        try:
            return message_class.FromString(data)
        except DecodeError as error:
            return MalformedMessage(full_name, str(error))

    return deserialize


def add_inference_service(servicer: Any, server: grpc.aio.Server) -> None:
    """``add_GRPCInferenceServiceServicer_to_server`` with lenient deserializers."""
    handlers = {}
    for method in SERVICE.methods:
        request_class = getattr(pb, method.input_type.name)
        response_class = getattr(pb, method.output_type.name)
        make = (
            grpc.stream_stream_rpc_method_handler
            if method.client_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=lenient_deserializer(request_class),
            response_serializer=response_class.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )


class GenericOnly:
    """A server as the generated ``add_*Servicer_to_server`` functions (health,
    reflection) see it: the generic handlers they add reach the server, the
    registered methods they add as well are left out (the generic handlers serve
    the same methods; see the module's docstring for why)."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        """Served by the generic handlers already."""


def request_parsers() -> dict[str, Callable[[bytes], Any]]:
    """Each method's lenient request parser, by method name (for requests that arrive
    as bytes: see :func:`add_inference_service_passing_bytes`)."""
    return {
        method.name: lenient_deserializer(getattr(pb, method.input_type.name))
        for method in SERVICE.methods
    }


def add_inference_service_passing_bytes(servicer: Any, server: Any) -> None:
    """The V2 service with requests left as bytes, for Ray Serve's gRPC proxy
    (``grpc_servicer_functions``): the proxy pickles a request to the replica, and
    inferd's messages, built in a private descriptor pool, do not pickle; the replica
    parses the bytes (:func:`request_parsers`)."""
    handlers = {}
    for method in SERVICE.methods:
        make = (
            grpc.stream_stream_rpc_method_handler
            if method.client_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make(getattr(servicer, method.name))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
