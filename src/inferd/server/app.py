"""Builds and runs the servers: start-up, signals, graceful drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from inferd.errors import ConfigurationError
from inferd.observability.metrics import Sources, build_registry, metrics_app
from inferd.observability.stats import GrpcStats, HttpStats, ModelStatsTable
from inferd.server.grpc.edge import GrpcEdge
from inferd.server.grpc.server import GrpcServer
from inferd.server.listener import EagerAcceptServer
from inferd.server.rest.api import build_rest_app
from inferd.server.rest.fastpath import RestApp
from inferd.server.shutdown import Shutdown, servers_stop_after
from inferd.server.transport import metrics_options, rest_options
from inferd.serving.dataplane import DataPlane
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository
from inferd.serving.repository_poll import RepositoryPoller
from inferd.serving.response_cache import ResponseCache
from inferd.serving.server_wide import LocalServerWide, ServerWide
from inferd.settings import ServerSettings
from inferd.types import ModelState
from inferd.workers.base import Pool
from inferd.workers.inprocess import InProcessPool

if TYPE_CHECKING:
    from inferd.observability.tracing import Tracing
    from inferd.workers.process import WorkerProcess

logger = logging.getLogger(__name__)

# One HTTP server running: what it is, the server, its task.
_Running = tuple[str, uvicorn.Server, asyncio.Task[None]]


class _Server(EagerAcceptServer):
    """A uvicorn server that leaves signal handling to :class:`InferenceServer`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def start_tracing(settings: ServerSettings) -> Tracing | None:
    """The server's tracer when tracing is on (None: off, and OpenTelemetry is not
    even imported)."""
    if not settings.tracing_enabled:
        return None
    try:
        from inferd.observability.tracing import Tracing
    except ImportError as error:
        raise ConfigurationError(
            f"Tracing is on (tracing_server, or OTEL_EXPORTER_OTLP_ENDPOINT), but the "
            f"OpenTelemetry SDK cannot be imported ({error}): pip install 'inferd[tracing]'"
        ) from None
    return Tracing.start(settings)


def build_pool(
    settings: ServerSettings, stats: ModelStatsTable | None = None
) -> tuple[Pool, Callable[[], Sequence[WorkerProcess]]]:
    """Worker processes for ``parallel_workers: N > 0``, else the main process, and
    how to list the pool's worker processes for the metrics (none in process).
    ``stats``: where the process pool counts inference timeouts."""
    if settings.parallel_workers == 0:
        return InProcessPool(), tuple
    from inferd.workers.env_pools import EnvironmentPools

    pools = EnvironmentPools(settings, stats=stats)
    return pools, lambda: pools.workers


def build_response_cache(settings: ServerSettings) -> ResponseCache | None:
    """The server's response cache: on with cache_enabled (each model opts in too)."""
    return ResponseCache(settings.cache_size) if settings.cache_enabled else None


class InferenceServer:
    """Everything one ``inferd start`` runs, wired together."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        # Statistics extension counters, plus Prometheus histograms when metrics are on.
        model_stats = ModelStatsTable(observe=settings.metrics_enabled)
        self.pool, self._worker_processes = build_pool(settings, model_stats)
        self.registry = Registry(
            self.pool, model_stats, settings.max_queue_size, build_response_cache(settings)
        )
        # Without a load at start the folder may come later (ModelMesh's adapter makes it).
        self.repository = ModelRepository(
            Path(settings.model_repository_root), loaded_later=not settings.load_models_at_startup
        )
        self.dataplane = DataPlane(settings, self.registry, self.repository)
        # Where the edges send what holds server-wide (loads, log level, shared memory,
        # statistics): this process alone, unless a supervisor's protocol process is
        # given the coordinator's (supervisor/forwarding.py) before its apps are built.
        self.server_wide: ServerWide = LocalServerWide(self.dataplane)
        # Reloads models whose folders change (repository_poll_secs; None: off).
        self.poller = (
            RepositoryPoller(self.repository, self.registry, settings.repository_poll_secs)
            if settings.repository_poll_secs > 0
            else None
        )
        # Per-protocol request counters, kept only when metrics are served.
        self.http_stats = HttpStats() if settings.metrics_enabled else None
        self.grpc_stats = GrpcStats() if settings.metrics_enabled else None
        self.tracing = start_tracing(settings)
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT, then drain and shut down (see shutdown.py)."""
        shutdown = Shutdown(self.dataplane.drain, self.settings.shutdown_grace_seconds, self.stop)
        shutdown.install_signal_handlers()
        try:
            await self._serve(shutdown)
        finally:
            shutdown.restore_signal_handlers()

    async def _serve(self, shutdown: Shutdown) -> None:
        listening = self._listen()  # first: a port in use is a clear error, nothing started
        await self.pool.start()
        servers = [
            (what, server, asyncio.create_task(server.serve([sock]), name=what))
            for what, server, sock in listening
        ]
        grpc_server = self.grpc_server()
        try:
            await grpc_server.start()
            for what, server, task in servers:
                await self._wait_started(what, server, task)
            await self.load_startup_models()
            await self._wait_for_stop(*(task for _, _, task in servers))
        finally:
            await self._shutdown(shutdown, servers, grpc_server)
            shutdown.finished()

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
        if self.poller is not None:
            self.poller.watch_from_now()  # a change made during the load is seen after it
        if self.settings.load_models_at_startup:
            await self.dataplane.load_all()
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

    def _listen(self) -> list[tuple[str, uvicorn.Server, socket.socket]]:
        """The HTTP servers to run (REST, and metrics if on), each with its bound socket."""
        settings = self.settings
        fix = "set http_port to a free port"
        rest = _listen(settings.host, settings.http_port, "the REST server", fix)
        servers: list[tuple[str, uvicorn.Server, socket.socket]] = [
            ("REST server", _Server(self._rest_config()), rest)
        ]
        if settings.metrics_enabled:
            fix = 'set metrics_port to a free port, or metrics_endpoint to "" to turn metrics off'
            metrics = _listen(settings.host, settings.metrics_port, "metrics", fix)
            servers.append(("Metrics server", _Server(self._metrics_config()), metrics))
        return servers

    def _rest_config(self) -> uvicorn.Config:
        settings = self.settings
        return self._uvicorn_config(
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
        sources = Sources(
            self.dataplane.model_stats,
            versions=self.registry.versions,
            workers=self._worker_processes,  # busy time, restarts
            http=self.http_stats,
            grpc=self.grpc_stats,
        )
        registry = build_registry(sources, settings.metrics_rest_server_prefix)
        return self._uvicorn_config(
            metrics_app(registry, settings.metrics_endpoint or "/metrics"),
            settings.metrics_port,
            **metrics_options(settings),
        )

    def _uvicorn_config(self, app: Any, port: int, **options: Any) -> uvicorn.Config:
        """One of this process's HTTP servers, on this event loop, logging through ours.

        ``access_log`` is the same for both: uvicorn's switch is one logger for all its
        servers (metrics scrapes are kept out of it by a filter, see observability/logs.py)."""
        return uvicorn.Config(
            app,
            host=self.settings.host,
            port=port,
            lifespan="off",
            access_log=self.settings.access_log_enabled,
            log_config=None,
            **({"http": "httptools"} | options),
        )

    async def _wait_started(
        self, what: str, server: uvicorn.Server, task: asyncio.Task[None]
    ) -> None:
        port = server.config.port
        while not server.started:
            if task.done():
                await task  # re-raises why it stopped
                raise RuntimeError(f"The {what} on port {port} stopped")
            await asyncio.sleep(0.01)
        logger.info("%s listening on %s:%d", what, self.settings.host, port)

    async def _wait_for_stop(self, *tasks: asyncio.Task[None]) -> None:
        stop = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        for task in done:
            if task is not stop:
                await task
                raise RuntimeError(f"{task.get_name()} stopped unexpectedly")

    async def _shutdown(
        self, shutdown: Shutdown, servers: list[_Running], grpc_server: GrpcServer
    ) -> None:
        """Drain the REST and gRPC servers, then unload the models and stop the
        workers while the metrics server stops (it serves scrapes until then)."""
        shutdown.begin("The server stopped serving")  # begun already, unless it failed
        if self.poller is not None:  # no model loads while the server drains
            await self.poller.stop()
        rest, *others = servers
        grpc_stopped = asyncio.create_task(grpc_server.stop(shutdown.seconds_until_servers_stop()))
        await _stop_servers([rest])
        await grpc_stopped
        closing = asyncio.gather(self.close(), _stop_servers(others))
        try:
            await asyncio.wait_for(closing, shutdown.seconds_until_close_ends())
        except TimeoutError:
            logger.warning(
                "Models or workers were still busy when the time to stop ran out "
                "(shutdown_grace_seconds); worker processes exit with the server"
            )
        if self.tracing is not None:  # the last spans, within what is left of the grace
            self.tracing.shutdown(max(shutdown.seconds_until_close_ends(), 0.5))


def _listen(host: str, port: int, what: str, fix: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise ConfigurationError(
            f"Cannot listen for {what} on {host}:{port}: {reason}; {fix}"
        ) from None


async def _stop_servers(servers: Sequence[_Running]) -> None:
    for _, server, task in servers:
        server.should_exit = True
        with contextlib.suppress(Exception, SystemExit):
            await task
