"""Builds and runs the servers: start-up, signals, graceful drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Generator
from pathlib import Path

import uvicorn

from ..dataplane import DataPlane
from ..registry import Registry
from ..repository import ModelRepository
from ..settings import ServerSettings
from ..workers.base import Pool
from ..workers.inprocess import InProcessPool
from ..workers.pool import ProcessPool
from .grpc import GrpcServer
from .rest import build_rest_app

logger = logging.getLogger(__name__)

# How long requests in flight may take to finish once shutdown starts.
SHUTDOWN_GRACE_SECONDS = 30


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to :class:`InferenceServer`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def build_pool(settings: ServerSettings) -> Pool:
    """Worker processes for ``parallel_workers: N > 0``, else the main process."""
    if settings.parallel_workers == 0:
        return InProcessPool()
    return ProcessPool(settings)


class InferenceServer:
    """Everything one ``inferd start`` runs, wired together."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.pool = build_pool(settings)
        self.registry = Registry(self.pool)
        self.repository = ModelRepository(Path(settings.model_repository_root))
        self.dataplane = DataPlane(settings, self.registry, self.repository)
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT, then drain and shut down."""
        self._install_signal_handlers()
        await self.pool.start()
        rest = _Server(self._rest_config())
        rest_task = asyncio.create_task(rest.serve(), name="rest-server")
        grpc_server = GrpcServer(self.dataplane, self.settings)
        try:
            await grpc_server.start()
            await self._wait_started(rest, rest_task)
            await self._load_startup_models()
            self.dataplane.started = True
            logger.info("inferd is ready")
            await self._wait_for_stop(rest_task)
        finally:
            await self._shutdown(rest, rest_task, grpc_server)

    def stop(self) -> None:
        self._stop.set()

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        logger.info("Received %s; shutting down", sig.name)
        self.stop()

    def _rest_config(self) -> uvicorn.Config:
        settings = self.settings
        return uvicorn.Config(
            build_rest_app(self.dataplane, settings),
            host=settings.host,
            port=settings.http_port,
            root_path=settings.root_path,
            lifespan="off",
            access_log=settings.debug,
            log_config=None,
            http="httptools",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        )

    async def _wait_started(self, server: uvicorn.Server, task: asyncio.Task[None]) -> None:
        while not server.started:
            if task.done():
                await task  # re-raises why it stopped
                raise RuntimeError(f"The REST server on port {self.settings.http_port} stopped")
            await asyncio.sleep(0.01)
        logger.info("REST server listening on %s:%d", self.settings.host, self.settings.http_port)

    async def _load_startup_models(self) -> None:
        if self.settings.load_models_at_startup:
            await self.dataplane.load_all()

    async def _wait_for_stop(self, *tasks: asyncio.Task[None]) -> None:
        stop = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait([stop, *tasks], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        for task in done:
            if task is not stop:
                await task
                raise RuntimeError(f"{task.get_name()} stopped unexpectedly")

    async def _shutdown(
        self, rest: uvicorn.Server, rest_task: asyncio.Task[None], grpc_server: GrpcServer
    ) -> None:
        self.dataplane.started = False
        rest.should_exit = True
        grpc_stopped = asyncio.create_task(grpc_server.stop(SHUTDOWN_GRACE_SECONDS))
        with contextlib.suppress(Exception, SystemExit):
            await rest_task
        await grpc_stopped
        await self.registry.close()
        await self.pool.close()
        logger.info("inferd stopped")
