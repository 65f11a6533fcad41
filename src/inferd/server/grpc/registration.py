"""Registering the inference service so that malformed messages are the client's error.

grpcio deserializes each request before the servicer runs; with the generated
``add_GRPCInferenceServiceServicer_to_server`` a message that is not valid
protobuf fails inside grpcio, which answers UNKNOWN with a Python exception name
and logs a traceback. Here the deserializer hands the servicer a
:class:`MalformedMessage` instead, which it answers with INVALID_ARGUMENT (and,
inside a stream, with that request's ``error_message``).
"""

from __future__ import annotations

from collections.abc import Callable
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
    # Registered methods skip the generic lookup per call; grpcio before 1.63 has only
    # the generic handlers above, which serve the same methods.
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(SERVICE.full_name, handlers)


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
