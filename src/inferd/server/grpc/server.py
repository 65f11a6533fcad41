"""The gRPC server of one ``inferd start``: the V2 service (server/grpc/servicer.py), health and
reflection on ``grpc_port``, with the access and tracing interceptors, started and
stopped gracefully."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from inferd.errors import ConfigurationError
from inferd.observability.stats import GrpcStats
from inferd.protocol import pb
from inferd.server.access import ApiGuard, api_guards
from inferd.server.grpc.access import access_interceptors
from inferd.server.grpc.health import INFERENCE_SERVICE, HealthServicer, ShutdownSignal
from inferd.server.grpc.registration import add_inference_service
from inferd.server.grpc.servicer import InferenceServicer
from inferd.server.transport import add_grpc_port, grpc_options, grpc_port_credentials
from inferd.serving.dataplane import DataPlane
from inferd.settings import ServerSettings

if TYPE_CHECKING:
    from inferd.observability.tracing import Tracing

logger = logging.getLogger(__name__)


def _reflection_pool() -> descriptor_pool.DescriptorPool:
    """Our protocol lives in a private pool; reflection needs health's and its own too."""
    pool = descriptor_pool.DescriptorPool()
    for file in (pb.DESCRIPTOR, health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR):
        pool.AddSerializedFile(file.serialized_pb)
    return pool


class GrpcServer:
    """The gRPC server of one ``inferd start``: start it, then stop it gracefully."""

    def __init__(
        self,
        dataplane: DataPlane,
        settings: ServerSettings,
        grpc_stats: GrpcStats | None = None,
        guards: dict[str, ApiGuard] | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        """``guards``: the API groups' guards (default: as the settings say, access.py).
        ``tracing``: a span for each call (server/traced.py), its model work under it."""
        self.settings = settings
        self.address = _address(settings.host, settings.grpc_port)
        self.max_message_length = settings.grpc_max_message_length or settings.max_request_size
        self._shutdown = ShutdownSignal()
        self._credentials = grpc_port_credentials(settings)  # None: plain
        interceptors = access_interceptors(api_guards(settings) if guards is None else guards)
        if tracing is not None:  # first: calls refused by the others are traced too
            from inferd.server.traced import TracingInterceptor

            interceptors.insert(0, TracingInterceptor(tracing))
        self._server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", self.max_message_length),
                ("grpc.max_send_message_length", self.max_message_length),
                # Without this a second server could bind the same port and share it.
                ("grpc.so_reuseport", 0),
                *grpc_options(settings),
            ],
        )
        add_inference_service(
            InferenceServicer(
                dataplane, self._shutdown, self.max_message_length, grpc_stats, tracing
            ),
            self._server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(
            HealthServicer(dataplane, self._shutdown), self._server
        )
        services = (INFERENCE_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)
        reflection.enable_server_reflection(
            (*services, reflection.SERVICE_NAME), self._server, pool=_reflection_pool()
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
        logger.info("gRPC server listening on %s", self.address)

    async def stop(self, grace: float) -> None:
        """Refuse new calls; let those in flight finish within ``grace`` seconds."""
        self._shutdown.set()
        await self._server.stop(grace)


def _address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"  # an IPv6 literal
    return f"{host}:{port}"
