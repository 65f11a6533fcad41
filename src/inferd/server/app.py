"""The lone server: what one ``inferd start`` runs when it is one process.

:class:`InferenceServer` is a :class:`~inferd.server.parts.ServerParts` with its
server-wide operations applied to itself (``LocalServerWide``), its own poll of
the repository (``repository_poll_secs``) and the public ports bound for it
alone. A supervisor's protocol process and its model host are the same parts
served another way (``role_servers.py``).
"""

from __future__ import annotations

from inferd.server.grpc.server import GrpcServer
from inferd.server.http_servers import Running, run_servers, wait_started
from inferd.server.parts import ServerParts
from inferd.server.shutdown import Shutdown
from inferd.serving.repository_poll import RepositoryPoller
from inferd.settings import ServerSettings


class InferenceServer(ServerParts):
    """Everything one ``inferd start`` runs as a lone server, wired together."""

    def __init__(self, settings: ServerSettings) -> None:
        super().__init__(settings)
        # Reloads models whose folders change (repository_poll_secs; None: off).
        self.poller = (
            RepositoryPoller(self.repository, self.changes, settings.repository_poll_secs)
            if settings.repository_poll_secs > 0
            else None
        )

    async def serve(self, shutdown: Shutdown) -> None:
        listening = self.listen()  # first: a port in use is a clear error, nothing started
        await self.pool.start()
        servers = run_servers(listening)
        grpc_server = self.grpc_server()
        try:
            await grpc_server.start()
            for what, server, task in servers:
                await wait_started(what, server, task, self.settings.host)
            await self.load_startup_models()
            await self.wait_for_stop(*(task for _, _, task in servers))
        finally:
            await self.shut_down(shutdown, servers[:1], servers[1:], grpc_server)
            shutdown.finished()

    async def load_startup_models(self) -> None:
        """Load the repository's models (if the settings say so); then the server is
        ready, and the repository is polled for changes (if the settings say so)."""
        if self.poller is not None:
            self.poller.watch_from_now()  # a change made during the load is seen after it
        if self.settings.load_models_at_startup:
            await self.dataplane.load_all()
        self.mark_ready()
        if self.poller is not None:
            self.poller.start()

    async def shut_down(
        self,
        shutdown: Shutdown,
        public: list[Running],
        others: list[Running],
        grpc_server: GrpcServer | None,
    ) -> None:
        if self.poller is not None:  # no model loads while the server drains
            await self.poller.stop()
        await super().shut_down(shutdown, public, others, grpc_server)

    async def close(self) -> None:
        if self.poller is not None:
            await self.poller.stop()
        await super().close()
