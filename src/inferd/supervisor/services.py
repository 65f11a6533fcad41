"""What the supervisor serves beside its protocol processes: the coordinator on
``coordinator.sock`` and, when metrics are on, their summed ``/metrics`` on
``metrics_port``."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.server.listener import listen_tcp
from inferd.server.protocol_role import bind_unix
from inferd.server.transport import metrics_options
from inferd.supervisor.coordinator import build_coordinator_app
from inferd.supervisor.main import Service, ServiceFactory, Supervised
from inferd.supervisor.metrics import build_metrics_app

METRICS_PORT_FIX = 'set metrics_port to a free port, or metrics_endpoint to "" to turn metrics off'


def coordinator(supervised: Supervised) -> Sequence[Service]:
    """Server-wide operations, applied in every protocol process (coordinator.py)."""
    app = build_coordinator_app(supervised.paths, supervised.count, supervised.host)
    return [Service("Coordinator", app, bind_unix(supervised.paths.coordinator))]


def summed_metrics(supervised: Supervised) -> Sequence[Service]:
    """``metrics_endpoint`` on ``metrics_port``: the sum of every process's (metrics.py)."""
    settings = supervised.settings
    if not settings.metrics_enabled:
        return []
    endpoint = settings.metrics_endpoint or "/metrics"
    app = build_metrics_app(supervised.paths, supervised.processes, endpoint)
    sock = listen_tcp(settings.host, settings.metrics_port, "metrics", METRICS_PORT_FIX)
    return [Service("Metrics server", app, sock, metrics_options(settings))]


SUPERVISOR_SERVICES: tuple[ServiceFactory, ...] = (coordinator, summed_metrics)
