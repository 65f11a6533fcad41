"""gRPC health checking (``grpc.health.v1.Health``) for the inference server.

Service ``""`` and ``inference.GRPCInferenceService`` are SERVING when the server
is ready (as ``/v2/health/ready``) and not stopping; service ``liveness`` while it
is live: use the latter for Kubernetes liveness probes. ``Watch`` sends the status
now and on every change, and ends once the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inferd.server.grpc.registration import SERVICE

INFERENCE_SERVICE = SERVICE.full_name
LIVENESS_SERVICE = "liveness"
HEALTH_WATCH_INTERVAL = 1.0
"""Seconds between status checks of a ``Watch`` call."""


class ShutdownSignal:
    """Set once when the server starts to stop; streams watch it to end early."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.stream_readers: set[asyncio.Task[None]] = set()

    @property
    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()
        for reader in self.stream_readers:
            reader.cancel()


class Probed(Protocol):
    """What the health service asks at each call: a DataPlane, or the supervisor's
    stand-in while the protocol fork parent loads (supervisor/loading.py)."""

    def ready(self) -> bool: ...

    def live(self) -> bool: ...


class HealthServicer(health_pb2_grpc.HealthServicer):
    """grpc.health.v1, answered from the DataPlane at the time of each call."""

    def __init__(self, dataplane: Probed, shutdown: ShutdownSignal) -> None:
        self.dataplane = dataplane
        self.shutdown = shutdown

    def _status(self, service: str) -> Any:
        status = health_pb2.HealthCheckResponse
        if service in ("", INFERENCE_SERVICE):
            healthy = self.dataplane.ready() and not self.shutdown.is_set
        elif service == LIVENESS_SERVICE:
            healthy = self.dataplane.live()
        else:
            return status.SERVICE_UNKNOWN
        return status.SERVING if healthy else status.NOT_SERVING

    async def Check(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        status = self._status(request.service)
        if status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"Unknown service {request.service!r}; use '' or {INFERENCE_SERVICE!r} "
                f"for readiness, {LIVENESS_SERVICE!r} for liveness",
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        """Send the status now and on every change; end once the server stops."""
        last = None
        while True:
            status = self._status(request.service)
            if status != last:
                yield health_pb2.HealthCheckResponse(status=status)
                last = status
            if self.shutdown.is_set:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.shutdown.event.wait(), HEALTH_WATCH_INTERVAL)
