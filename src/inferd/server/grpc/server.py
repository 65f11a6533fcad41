"""The gRPC server of one ``inferd start``: the V2 service (server/grpc/servicer.py, through
the gRPC edge, server/grpc/edge.py), health and reflection on ``grpc_port`` (those two
behind the access interceptor), started and stopped gracefully."""

from __future__ import annotations

import logging

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from inferd.errors import ConfigurationError
from inferd.observability.logs import SERVER_EVENT
from inferd.protocol import pb
from inferd.server.grpc.access import access_interceptors
from inferd.server.grpc.edge import GrpcEdge
from inferd.server.grpc.health import INFERENCE_SERVICE, HealthServicer, ShutdownSignal
from inferd.server.grpc.registration import GenericOnly, add_inference_service
from inferd.server.grpc.servicer import InferenceServicer
from inferd.server.transport import add_grpc_port, grpc_options, grpc_port_credentials
from inferd.settings import ServerSettings

logger = logging.getLogger(__name__)


def _reflection_pool() -> descriptor_pool.DescriptorPool:
    """Our protocol lives in a private pool; reflection needs health's and its own too."""
    pool = descriptor_pool.DescriptorPool()
    for file in (pb.DESCRIPTOR, health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR):
        pool.AddSerializedFile(file.serialized_pb)
    return pool


class GrpcServer:
    """The gRPC server of one ``inferd start``: start it, then stop it gracefully."""

    def __init__(self, edge: GrpcEdge, settings: ServerSettings, reuse_port: bool = False) -> None:
        """``edge``: what the V2 service's calls go through (access, spans, counters);
        health and reflection are checked by the access interceptor, with the same
        guards (as the settings say, access.py). ``reuse_port``: share the port with
        the other protocol processes (SO_REUSEPORT; server/protocol_role.py)."""
        self.settings = settings
        self.address = grpc_address(settings.host, settings.grpc_port)
        self.max_message_length = settings.grpc_max_message_length or settings.max_request_size
        dataplane = edge.dataplane
        self._shutdown = ShutdownSignal()
        self._credentials = grpc_port_credentials(settings)  # None: plain
        self._server = grpc.aio.server(
            interceptors=access_interceptors(edge.guards),
            options=[
                ("grpc.max_receive_message_length", self.max_message_length),
                ("grpc.max_send_message_length", self.max_message_length),
                # Off, a second server cannot bind the same port and share it unasked.
                ("grpc.so_reuseport", int(reuse_port)),
                *grpc_options(settings),
            ],
        )
        add_inference_service(InferenceServicer(edge, self._shutdown), self._server)
        generic = GenericOnly(self._server)  # no registered methods (registration.py)
        health_pb2_grpc.add_HealthServicer_to_server(
            HealthServicer(dataplane, self._shutdown), generic
        )
        services = (INFERENCE_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)
        reflection.enable_server_reflection(
            (*services, reflection.SERVICE_NAME), generic, pool=_reflection_pool()
        )

    async def start(self) -> None:
        try:
            port = add_grpc_port(self._server, self.address, self._credentials)
        except RuntimeError as error:
            port = 0
            logger.debug("gRPC bind failed: %s", error)
        if port == 0:
            raise ConfigurationError(
                f"Cannot listen for gRPC on {self.address}: the address is in use or not "
                "available here; set grpc_port (or host) to a free one"
            )
        await self._server.start()
        logger.info("gRPC server listening on %s", self.address, extra=SERVER_EVENT)

    async def stop(self, grace: float) -> None:
        """Refuse new calls; let those in flight finish within ``grace`` seconds."""
        self._shutdown.set()
        await self._server.stop(grace)


def grpc_address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"  # an IPv6 literal
    return f"{host}:{port}"
