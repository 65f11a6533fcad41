"""What the supervisor serves beside its protocol processes: the coordinator on
``coordinator.sock`` (with the repository poll beside it, when
``repository_poll_secs`` is set) and, when metrics are on, their summed
``/metrics`` on ``metrics_port``."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.host.on_demand import HostOnDemand
from inferd.server.listener import listen_tcp
from inferd.server.protocol_role import bind_unix
from inferd.server.transport import metrics_options
from inferd.supervisor.coordinator import Coordinator
from inferd.supervisor.coordinator_calls import coordinator_calls
from inferd.supervisor.main import ServiceFactory, Supervised
from inferd.supervisor.metrics import build_metrics_app
from inferd.supervisor.repository_changes import repository_poll
from inferd.supervisor.served import Service

METRICS_PORT_FIX = 'set metrics_port to a free port, or metrics_endpoint to "" to turn metrics off'


def coordinator(supervised: Supervised) -> Sequence[Service]:
    """Server-wide operations, applied in every protocol process (coordinator.py), the
    model host started when a load needs it, and the repository's changes."""
    settings = supervised.settings
    # The fork parent loaded at start (when it runs) what every process copies.
    forked = settings.fork_protocol_processes
    shared = supervised.placement.copied_names() if forked else frozenset()
    on_demand = HostOnDemand(settings, supervised.start_host, shared)
    found = Coordinator(supervised.paths, supervised.count, supervised.host, on_demand)
    found.before_ready = supervised.before_ready
    poll = repository_poll(settings, found, supervised.stopping)
    sock = bind_unix(supervised.paths.coordinator)
    return [Service("Coordinator", None, sock, background=poll, calls=coordinator_calls(found))]


def summed_metrics(supervised: Supervised) -> Sequence[Service]:
    """``metrics_endpoint`` on ``metrics_port``: the sum of every process's (metrics.py)."""
    settings = supervised.settings
    if not settings.metrics_enabled:
        return []
    endpoint = settings.metrics_endpoint or "/metrics"
    app = build_metrics_app(supervised.paths, supervised.processes, endpoint, supervised.pids)
    sock = listen_tcp(settings.host, settings.metrics_port, "metrics", METRICS_PORT_FIX)
    return [Service("Metrics server", app, sock, metrics_options(settings))]


SUPERVISOR_SERVICES: tuple[ServiceFactory, ...] = (coordinator, summed_metrics)
