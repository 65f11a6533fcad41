"""Builds and runs the servers: start-up, signals, graceful drain."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import uvicorn

from inferd.observability.metrics import Sources, build_registry, metrics_app
from inferd.observability.on_demand_metrics import OnDemandCollector
from inferd.observability.stats import GrpcStats, HttpStats, ModelStatsTable
from inferd.server.grpc.edge import GrpcEdge
from inferd.server.grpc.server import GrpcServer
from inferd.server.host_edge import close_host, serve_host
from inferd.server.http_servers import (
    Listening,
    Running,
    run_servers,
    stop_servers,
    uvicorn_config,
    wait_started,
)
from inferd.server.listener import SignalFreeServer, listen_tcp
from inferd.server.protocol_role import ProtocolProcess, bind_unix, private_rest_app
from inferd.server.rest.api import build_rest_app
from inferd.server.rest.fastpath import RestApp
from inferd.server.shutdown import (
    CUT_SIGNAL,
    SAME_STOP_SECONDS,
    SIGNALS,
    Shutdown,
    servers_stop_after,
)
from inferd.server.traced import start_tracing
from inferd.server.transport import metrics_options, rest_options
from inferd.server.worker_calls import model_calls_served
from inferd.serving.dataplane import DataPlane
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository
from inferd.serving.repository_poll import LocalChanges, RepositoryPoller
from inferd.serving.response_cache import ResponseCache
from inferd.serving.server_wide import LocalServerWide, ServerWide
from inferd.settings import ServerSettings
from inferd.types import ModelState
from inferd.workers.build import build_pool

logger = logging.getLogger(__name__)


class InferenceServer:
    """Everything one ``inferd start`` runs, wired together."""

    def __init__(self, settings: ServerSettings, role: ProtocolProcess | None = None) -> None:
        """``role``: set in a supervisor's protocol process (see protocol_role.py)."""
        self.settings = settings
        self.role = role
        # Statistics extension counters, plus Prometheus histograms when metrics are on.
        model_stats = ModelStatsTable(observe=settings.metrics_enabled)
        self.pool, self._worker_processes = build_pool(settings, model_stats)
        queue_bound = role.queue_bound if role is not None else None
        self.registry = Registry(
            self.pool,
            model_stats,
            settings.max_queue_size if queue_bound is None else queue_bound,
            ResponseCache(settings.cache_size) if settings.cache_enabled else None,
            placement=role.placement if role is not None else None,
        )
        # Without a load at start the folder may come later (ModelMesh's adapter makes it).
        self.repository = ModelRepository(
            Path(settings.model_repository_root), loaded_later=not settings.load_models_at_startup
        )
        self.dataplane = DataPlane(settings, self.registry, self.repository)
        # The repository's changes, as the poller finds them, applied to this process.
        self.changes = LocalChanges(self.repository, self.registry, settings.load_on_request)
        self.dataplane.models_ready_once_started = role is not None
        on_demand = self.dataplane.on_demand
        if on_demand is not None and role is not None:  # a request's load is server-wide
            host = role.host_socket is not None
            on_demand.join_processes(None if host else self.server_wide_load_on_request)
        # Where the edges send what holds server-wide (loads, log level, shared memory,
        # statistics): this process alone, unless a supervisor's protocol process is
        # given the coordinator's (supervisor/forwarding.py) before its apps are built.
        self.server_wide: ServerWide = LocalServerWide(self.dataplane)
        # Reloads models whose folders change (repository_poll_secs; None: off). Among
        # several processes the supervisor polls, once for all (protocol_role.py).
        self.poller = (
            RepositoryPoller(self.repository, self.changes, settings.repository_poll_secs)
            if settings.repository_poll_secs > 0 and role is None
            else None
        )
        # Per-protocol request counters, kept only when metrics are served.
        self.http_stats = HttpStats() if settings.metrics_enabled else None
        self.grpc_stats = GrpcStats() if settings.metrics_enabled else None
        self.tracing = start_tracing(settings)
        self._stop = asyncio.Event()

    async def server_wide_load_on_request(self, name: str, evict: str | None) -> None:
        await self.server_wide.load_on_request(name, evict)  # the supervisor's, once set

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT, then drain and shut down (see shutdown.py)."""
        # A protocol process may get one stop twice: the supervisor forwards SIGTERM,
        # and a service manager that signals the whole group (systemd's default) sends
        # its own; a repeat that close is the same stop, not the second signal that cuts.
        repeat = 0.0 if self.role is None else SAME_STOP_SECONDS
        shutdown = Shutdown(
            self.dataplane.drain, self.settings.shutdown_grace_seconds, self.stop, repeat
        )
        # A protocol process drains on SIGTERM alone: a Ctrl-C reaches its whole
        # process group, and the supervisor forwards it as SIGTERM (two would cut).
        # The supervisor's cut of a second signal comes as CUT_SIGNAL, never taken
        # for the same stop.
        protocol_signals = (signal.SIGTERM, CUT_SIGNAL)
        shutdown.install_signal_handlers(SIGNALS if self.role is None else protocol_signals)
        try:
            # Runtimes (here and in worker processes) call models through this dataplane.
            async with model_calls_served(self.dataplane, self.settings):
                if self.role is None:
                    await self._serve(shutdown)
                else:
                    await self._serve_in_role(shutdown, self.role)
        finally:
            shutdown.restore_signal_handlers()

    async def _serve(self, shutdown: Shutdown) -> None:
        listening = self._listen()  # first: a port in use is a clear error, nothing started
        await self.pool.start()
        servers = run_servers(listening)
        grpc_server = self.grpc_server()
        try:
            await grpc_server.start()
            for what, server, task in servers:
                await wait_started(what, server, task, self.settings.host)
            await self.load_startup_models()
            await self._wait_for_stop(*(task for _, _, task in servers))
        finally:
            await self._shutdown(shutdown, servers[:1], servers[1:], grpc_server)
            shutdown.finished()

    async def _serve_in_role(self, shutdown: Shutdown, role: ProtocolProcess) -> None:
        """A protocol process (or the model host: no public port): private sockets, models,
        ``before_public``; the public ports before the models at the start (live while they
        load), after them in a restart joining processes that serve (protocol_role.py)."""
        private = run_servers(self._private_servers(role))
        public: list[Running] = []
        grpc_server, host = None, None
        try:
            await self.pool.start()
            for what, server, task in private:
                await wait_started(what, server, task, self.settings.host)
            if role.open_ports_first:
                public, grpc_server, host = await self._open_ports(role)
            await self.load_models()
            if role.before_public is not None:
                await role.before_public()
            if not role.open_ports_first and not self._stop.is_set():  # never after a SIGTERM
                public, grpc_server, host = await self._open_ports(role)
            if not self._stop.is_set():
                self.mark_ready()
            await self._wait_for_stop(*(task for _, _, task in [*public, *private]))
        finally:
            await self._shutdown(shutdown, public, private, grpc_server)
            if host is not None:  # the protocol processes have gone: nothing more comes
                close_host(host)
            shutdown.finished()

    async def _open_ports(
        self, role: ProtocolProcess
    ) -> tuple[list[Running], GrpcServer | None, asyncio.Server | None]:
        """The public ports; the model host's socket instead in the host (at a restart
        after its models, as ports: a protocol process reconnecting then finds a host
        that answers, or none, never one whose load would hold its requests)."""
        if role.host_socket is not None:
            host = await serve_host(self.dataplane, bind_unix(role.host_socket), self.pool)
            return [], None, host
        public, grpc_server = await self._open_public()
        return public, grpc_server, None

    async def _open_public(self) -> tuple[list[Running], GrpcServer]:
        """The public REST and gRPC ports, shared with the other protocol processes."""
        public = run_servers(self._listen(shared=True))
        grpc_server = GrpcServer(self.grpc_edge(), self.settings, reuse_port=True)
        await grpc_server.start()
        for what, server, task in public:
            await wait_started(what, server, task, self.settings.host)
        return public, grpc_server

    def _private_servers(self, role: ProtocolProcess) -> list[Listening]:
        """The whole REST app without access rules (nor HTTP statistics: these are the
        coordinator's requests, not clients'), and the metrics exposition, each on its
        own unix socket."""
        rest = private_rest_app(self.dataplane, self.changes, role.switch)
        apps = [("Private REST server", rest, role.rest_socket)]
        if self.settings.metrics_enabled:
            apps.append(("Private metrics server", self._metrics_app(), role.metrics_socket))
        return [
            (
                what,
                SignalFreeServer(
                    uvicorn_config(self.settings, app, 0, uds=str(path), server_header=False)
                ),
                bind_unix(path),
            )
            for what, app, path in apps
        ]

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

    def grpc_server(self) -> GrpcServer:
        """The gRPC server (not started), serving this server's DataPlane."""
        return GrpcServer(self.grpc_edge(), self.settings)

    async def load_startup_models(self) -> None:
        """Load the repository's models (if the settings say so); then the server is
        ready, and the repository is polled for changes (if the settings say so)."""
        await self.load_models()
        self.mark_ready()

    async def load_models(self) -> None:
        """Load the repository's models (if the settings say so)."""
        if self.poller is not None:
            self.poller.watch_from_now()  # a change made during the load is seen after it
        at_start = self.role is None or self.role.models_at_start
        if self.settings.load_models_at_startup and at_start:
            await self.dataplane.load_all()

    def mark_ready(self) -> None:
        """The server is ready; the repository is polled from now on (if the settings say)."""
        self.dataplane.started = True
        self._log_readiness()
        if self.poller is not None:
            self.poller.start()

    async def close(self) -> None:
        """Unload every model and stop the pool (the servers have stopped already)."""
        if self.poller is not None:
            await self.poller.stop()
        await self.registry.close()
        await self.pool.close()
        if self.role is not None and self.role.placement.elsewhere is not None:
            await self.role.placement.elsewhere.close()  # the model host's connection
        if self.dataplane.shared_memory is not None:
            self.dataplane.shared_memory.close()  # unmap what clients registered

    def _log_readiness(self) -> None:
        failed = [v.name for v in self.registry.versions() if v.state is not ModelState.READY]
        if failed:
            logger.error(
                "inferd is serving, but not ready: %d model version(s) failed to load (%s); "
                "see the errors above, fix them and load them again",
                len(failed),
                ", ".join(sorted(set(failed))),
            )
        else:
            logger.info("inferd is ready")

    def stop(self) -> None:
        self._stop.set()

    def _listen(self, shared: bool = False) -> list[Listening]:
        """The HTTP servers to run (REST, and metrics if on), each with its bound socket.
        ``shared``: a protocol process's REST port alone, bound with SO_REUSEPORT."""
        settings = self.settings
        fix = "set http_port to a free port"
        rest = listen_tcp(settings.host, settings.http_port, "the REST server", fix, shared)
        servers: list[Listening] = [("REST server", SignalFreeServer(self._rest_config()), rest)]
        if settings.metrics_enabled and not shared:
            fix = 'set metrics_port to a free port, or metrics_endpoint to "" to turn metrics off'
            metrics = listen_tcp(settings.host, settings.metrics_port, "metrics", fix)
            servers.append(("Metrics server", SignalFreeServer(self._metrics_config()), metrics))
        return servers

    def _rest_config(self) -> uvicorn.Config:
        settings = self.settings
        return uvicorn_config(
            self.settings,
            self.served_rest_app(),
            settings.http_port,
            root_path=settings.root_path,
            # Its connections, streams included, have been answered by then (shutdown.py).
            timeout_graceful_shutdown=servers_stop_after(settings.shutdown_grace_seconds),
            **rest_options(settings),
        )

    def _metrics_config(self) -> uvicorn.Config:
        """The Prometheus endpoint: its own small server, on this event loop."""
        settings = self.settings
        return uvicorn_config(
            self.settings, self._metrics_app(), settings.metrics_port, **metrics_options(settings)
        )

    def _metrics_app(self) -> Any:
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

    async def _wait_for_stop(self, *tasks: asyncio.Task[None]) -> None:
        stop = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        for task in done:
            if task is not stop:
                await task
                raise RuntimeError(f"{task.get_name()} stopped unexpectedly")

    async def _shutdown(
        self,
        shutdown: Shutdown,
        public: list[Running],
        others: list[Running],
        grpc_server: GrpcServer | None,
    ) -> None:
        """Drain the public REST and gRPC servers, then unload the models and stop the
        workers while the other servers stop (metrics serves scrapes until then)."""
        shutdown.begin("The server stopped serving")  # begun already, unless it failed
        if self.poller is not None:  # no model loads while the server drains
            await self.poller.stop()
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
