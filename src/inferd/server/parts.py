"""The parts every kind of server is made of, whichever it is.

A lone server (``app.py`` :class:`~inferd.server.app.InferenceServer`), a protocol
process and the model host (``role_servers.py``) are each a :class:`ServerParts`
with its own way of serving it:

- the data plane: pool, registry, repository, DataPlane, statistics, tracing;
- where its server-wide operations go (``server_wide``, given at construction):
  applied here (``LocalServerWide``, a lone server's) or sent to the supervisor's
  coordinator (``ForwardingServerWide``, a protocol process's and the host's);
- the apps its listeners serve: the REST app, the gRPC edge, the metrics exposition.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import uvicorn

from inferd.observability.logs import SERVER_EVENT, now_ready
from inferd.observability.metrics import Sources, build_registry, metrics_app
from inferd.observability.on_demand_metrics import OnDemandCollector
from inferd.observability.stats import GrpcStats, HttpStats, ModelStatsTable
from inferd.server.grpc.edge import GrpcEdge
from inferd.server.grpc.server import GrpcServer
from inferd.server.http_servers import Listening, Running, stop_servers, uvicorn_config
from inferd.server.listener import SignalFreeServer, listen_tcp
from inferd.server.rest.api import build_rest_app
from inferd.server.rest.fastpath import RestApp
from inferd.server.roles import RoleProcess
from inferd.server.shutdown import SIGNALS, Shutdown, servers_stop_after
from inferd.server.traced import start_tracing
from inferd.server.transport import metrics_options, rest_options
from inferd.server.worker_calls import model_calls_served
from inferd.serving.backends import BackendChoice
from inferd.serving.dataplane import DataPlane
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository
from inferd.serving.repository_poll import LocalChanges
from inferd.serving.response_cache import ResponseCache
from inferd.serving.server_wide import LocalServerWide, ServerWide
from inferd.settings import ServerSettings
from inferd.types import ModelState
from inferd.workers.build import build_pool

logger = logging.getLogger(__name__)


class ServerParts:
    """One server's data plane, its server-wide operations and its apps."""

    def __init__(
        self,
        settings: ServerSettings,
        server_wide: ServerWide | None = None,
        backends: BackendChoice | None = None,
        queue_bound: int | None = None,
    ) -> None:
        """``server_wide``: where the edges' server-wide operations go (None: applied
        here); ``backends``: which backend serves each model, this process's own or
        the model host's (None: its own, every one); ``queue_bound``: a model's queue
        bound when it sets none (None: the server's ``max_queue_size``)."""
        self.settings = settings
        # Statistics extension counters, plus Prometheus histograms when metrics are on.
        model_stats = ModelStatsTable(observe=settings.metrics_enabled)
        self.pool, self._worker_processes = build_pool(settings, model_stats)
        self.registry = Registry(
            self.pool,
            model_stats,
            settings.max_queue_size if queue_bound is None else queue_bound,
            ResponseCache(settings.cache_size) if settings.cache_enabled else None,
            choice=backends,
        )
        self.backends = backends
        # Without a load at start the folder may come later (ModelMesh's adapter makes it).
        self.repository = ModelRepository(
            Path(settings.model_repository_root), loaded_later=not settings.load_models_at_startup
        )
        self.dataplane = DataPlane(settings, self.registry, self.repository)
        # The repository's changes, as a poller finds them, applied to this process.
        self.changes = LocalChanges(self.repository, self.registry, settings.load_on_request)
        self.server_wide = (
            server_wide if server_wide is not None else LocalServerWide(self.dataplane)
        )
        if self.dataplane.shared_memory is not None:
            self.dataplane.shared_memory.on_drained = self._region_drained
        self._drains: set[asyncio.Task[None]] = set()
        # Per-protocol request counters, kept only when metrics are served.
        self.http_stats = HttpStats() if settings.metrics_enabled else None
        self.grpc_stats = GrpcStats() if settings.metrics_enabled else None
        self.tracing = start_tracing(settings, self.dataplane.trace_settings)
        self._stop = asyncio.Event()

    def _region_drained(self, name: str, kind: str) -> None:
        """The last request here that used unregistered region ``name`` has ended: ask
        server-wide again, so that it goes once no process holds it (triton/shm.py)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a claim collected outside the event loop: this process alone
            if self.dataplane.shared_memory is not None:
                self.dataplane.shared_memory.drop(name, kind)
            return
        drain = loop.create_task(
            self._drop_drained(name, kind), name=f"drop shared memory region {name}"
        )
        self._drains.add(drain)
        drain.add_done_callback(self._drains.discard)

    async def _drop_drained(self, name: str, kind: str) -> None:
        try:
            await self.server_wide.unregister_memory(name, kind, drained=True)
        except Exception:  # the server stops, say: the region goes with it
            logger.warning(
                "Dropping unregistered shared memory region %r failed", name, exc_info=True
            )

    def rest_app(self) -> RestApp:
        """The REST API as an ASGI app, serving this server's DataPlane."""
        return build_rest_app(
            self.dataplane,
            self.settings,
            self.http_stats,
            tracing=self.tracing,
            server_wide=self.server_wide,
        )

    def served_rest_app(self) -> Any:
        """The REST app as it is served: with a span per request when tracing is on."""
        app: Any = self.rest_app()
        if self.tracing is not None:
            from inferd.server.traced import TracedApp

            app = TracedApp(app, self.tracing)
        return app

    def grpc_edge(self) -> GrpcEdge:
        """The gRPC edge of this server's DataPlane: what every gRPC entry calls
        through (the gRPC server's servicer, Ray's gRPC proxy)."""
        settings = self.settings
        max_message_length = settings.grpc_max_message_length or settings.max_request_size
        return GrpcEdge(
            self.dataplane,
            max_message_length,
            tracing=self.tracing,
            grpc_stats=self.grpc_stats,
            server_wide=self.server_wide,
        )

    def grpc_server(self, reuse_port: bool = False) -> GrpcServer:
        """The gRPC server (not started), serving this server's DataPlane."""
        return GrpcServer(self.grpc_edge(), self.settings, reuse_port=reuse_port)

    def metrics_app(self) -> Any:
        """The Prometheus exposition of this server's counters."""
        settings = self.settings
        sources = Sources(
            self.dataplane.model_stats,
            versions=self.registry.versions,
            workers=self._worker_processes,  # busy time, restarts
            http=self.http_stats,
            grpc=self.grpc_stats,
        )
        registry = build_registry(sources, settings.metrics_rest_server_prefix)
        if self.dataplane.on_demand is not None:
            registry.register(OnDemandCollector(self.dataplane.on_demand))
        return metrics_app(registry, settings.metrics_endpoint or "/metrics")

    async def close(self) -> None:
        """Unload every model and stop the pool (the servers have stopped already)."""
        await self.registry.close()
        await self.pool.close()
        if self.backends is not None and self.backends.elsewhere is not None:
            await self.backends.elsewhere.close()  # the model host's connection
        if self.dataplane.shared_memory is not None:
            self.dataplane.shared_memory.close()  # unmap what clients registered

    def mark_ready(self) -> None:
        """The server is ready: say so, or which models failed to load."""
        self.dataplane.started = True
        failed = [v.name for v in self.registry.versions() if v.state is not ModelState.READY]
        if failed:
            logger.error(
                "inferd is serving, but not ready: %d model version(s) failed to load (%s); "
                "see the errors above, fix them and load them again",
                len(failed),
                ", ".join(sorted(set(failed))),
            )
        else:
            logger.info("inferd is ready", extra=SERVER_EVENT)
        now_ready()

    def stop(self) -> None:
        self._stop.set()

    async def wait_for_stop(self, *tasks: asyncio.Task[None]) -> None:
        """Until stop() is called; RuntimeError if a server's task ends first."""
        stop = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        for task in done:
            if task is not stop:
                await task
                raise RuntimeError(f"{task.get_name()} stopped unexpectedly")

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # Serving: each kind of server says how (serve), on the same run and shutdown.

    # The signals that stop it (SIGTERM/SIGINT for a lone server), and how soon a repeat
    # is the same stop rather than the second signal that cuts (shutdown.py).
    stop_signals: tuple[signal.Signals, ...] = SIGNALS
    same_stop_seconds = 0.0

    async def run(self) -> None:
        """Serve until a stop signal, then drain and shut down (see shutdown.py)."""
        shutdown = Shutdown(
            self.dataplane.drain,
            self.settings.shutdown_grace_seconds,
            self.stop,
            self.same_stop_seconds,
        )
        shutdown.install_signal_handlers(self.stop_signals)
        try:
            # Runtimes (here and in worker processes) call models through this dataplane.
            async with model_calls_served(self.dataplane, self.calls_role()):
                await self.serve(shutdown)
        finally:
            shutdown.restore_signal_handlers()

    async def serve(self, shutdown: Shutdown) -> None:
        raise NotImplementedError

    def calls_role(self) -> RoleProcess | None:
        """A supervisor's protocol process or model host (role_servers.py): where model
        calls cross between its processes. None: a lone server."""
        return None

    def listen(self, shared: bool = False) -> list[Listening]:
        """The HTTP servers to run (REST, and metrics if on), each with its bound socket.
        ``shared``: a protocol process's REST port alone, bound with SO_REUSEPORT."""
        settings = self.settings
        fix = "set http_port to a free port"
        rest = listen_tcp(settings.host, settings.http_port, "the REST server", fix, shared)
        servers: list[Listening] = [("REST server", SignalFreeServer(self._rest_config()), rest)]
        if settings.metrics_enabled and not shared:
            fix = 'set metrics_port to a free port, or metrics_endpoint to "" to turn metrics off'
            metrics = listen_tcp(settings.host, settings.metrics_port, "metrics", fix)
            config = uvicorn_config(
                settings, self.metrics_app(), settings.metrics_port, **metrics_options(settings)
            )
            servers.append(("Metrics server", SignalFreeServer(config), metrics))
        return servers

    def _rest_config(self) -> uvicorn.Config:
        settings = self.settings
        return uvicorn_config(
            settings,
            self.served_rest_app(),
            settings.http_port,
            root_path=settings.root_path,
            # Its connections, streams included, have been answered by then (shutdown.py).
            timeout_graceful_shutdown=servers_stop_after(settings.shutdown_grace_seconds),
            **rest_options(settings),
        )

    async def shut_down(
        self,
        shutdown: Shutdown,
        public: list[Running],
        others: list[Running],
        grpc_server: GrpcServer | None,
    ) -> None:
        """Drain the public REST and gRPC servers, then unload the models and stop the
        workers while the other servers stop (metrics serves scrapes until then)."""
        shutdown.begin("The server stopped serving")  # begun already, unless it failed
        if grpc_server is not None:
            grpc_stopped = grpc_server.stop(shutdown.seconds_until_servers_stop())
            await asyncio.gather(stop_servers(public), grpc_stopped)
        else:
            await stop_servers(public)
        closing = asyncio.gather(self.close(), stop_servers(others))
        try:
            await asyncio.wait_for(closing, shutdown.seconds_until_close_ends())
        except TimeoutError:
            logger.warning(
                "Models or workers were still busy when the time to stop ran out "
                "(shutdown_grace_seconds); worker processes exit with the server"
            )
        if self.tracing is not None:  # the last spans, within what is left of the grace
            self.tracing.shutdown(max(shutdown.seconds_until_close_ends(), 0.5))
