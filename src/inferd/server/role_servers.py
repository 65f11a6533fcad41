"""A supervisor's protocol process and its model host: the lone server's parts
(``parts.py``), served in a role (``roles.py``: a ``ProtocolProcess``, or the host's
``ModelHostProcess``).

- :class:`ProtocolProcessServer`: its server-wide operations go to the supervisor's
  coordinator (the ``ServerWide`` it is given: ``supervisor/forwarding.py``), a
  request's load on request too; it opens the public ports shared with the other
  protocol processes (``SO_REUSEPORT``).
- the model host's server (``host/process.py`` ``ModelHostServer``), a
  :class:`RoleServer` too: it opens no public port, only ``host.sock``.

Both serve the coordinator's operations (in frames: workers/private_calls.py),
their REST app (no access rules) and their metrics on private sockets, and start
in their role's order (``roles.py`` ``start_order``: workers, private sockets,
models, catching up, then ready; their public side, ports or ``host.sock``, first at
the server's start, live while they load, and last in a process restarted after a
death).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from functools import partial

from inferd.server.grpc.server import GrpcServer
from inferd.server.http_servers import Listening, Running, run_servers, uvicorn_config, wait_started
from inferd.server.listener import SignalFreeServer
from inferd.server.parts import ServerParts
from inferd.server.protocol_role import OperationsHere, bind_unix, private_rest_app
from inferd.server.roles import ProtocolProcess, RoleProcess, Step, SwitchBarrier
from inferd.server.shutdown import CUT_SIGNAL, SAME_STOP_SECONDS, Shutdown
from inferd.serving.server_wide import ServerWide
from inferd.settings import ServerSettings
from inferd.workers.private_calls import close_server, serve_calls

# Not done once a stop began: no port opens, and nothing says ready, after a SIGTERM.
AFTER_A_STOP_SKIPPED = (Step.PUBLIC, Step.READY)


class RoleServer(ServerParts):
    """What a protocol process and the model host share: their start and stop."""

    # A Ctrl-C reaches the whole process group, and the supervisor forwards it as
    # SIGTERM (two would cut): SIGTERM alone drains. The supervisor's cut of a second
    # signal comes as CUT_SIGNAL, never taken for the same stop. A service manager that
    # signals the whole group (systemd's default) sends its own SIGTERM beside the
    # supervisor's: a repeat that close is the same stop.
    stop_signals = (signal.SIGTERM, CUT_SIGNAL)
    same_stop_seconds = SAME_STOP_SECONDS

    def __init__(
        self,
        settings: ServerSettings,
        role: RoleProcess,
        server_wide: ServerWide | None,
        queue_bound: int | None = None,
        switch: SwitchBarrier | None = None,
    ) -> None:
        super().__init__(settings, server_wide, role.backends, queue_bound)
        self.role = role
        self._switch = switch
        self._public: list[Running] = []
        self._grpc_server: GrpcServer | None = None
        self._told_of_stop: list[Callable[[], None]] = []
        self._operations: asyncio.Server | None = None
        # None of its models reads ready before the process is (every process loaded).
        self.dataplane.models_ready_once_started = True

    def calls_role(self) -> RoleProcess:
        return self.role

    def when_stopping(self, told: Callable[[], None]) -> None:
        """Call ``told`` as soon as its stop begins (its SIGTERM), before it drains."""
        self._told_of_stop.append(told)

    def stop(self) -> None:
        super().stop()
        told, self._told_of_stop = self._told_of_stop, []
        for call in told:
            call()

    async def open_public(self) -> tuple[list[Running], GrpcServer | None]:
        """Its public side (a protocol process's ports, the host's socket)."""
        raise NotImplementedError

    async def serve(self, shutdown: Shutdown) -> None:
        """The steps of its start, in its role's order (roles.py ``start_order``),
        then serve until stopped; the public side and ready are skipped once stopping
        (never opened after a SIGTERM)."""
        private = run_servers(self._private_servers())
        steps: dict[Step, Callable[[], Awaitable[None]] | None] = {
            Step.WORKERS: self.pool.start,
            Step.PRIVATE: partial(self._private_started, private),
            Step.PUBLIC: self._open_public,
            Step.MODELS: self._load_models,
            Step.CATCH_UP: self.role.catch_up,
            Step.READY: self._ready,
        }
        try:
            for step in self.role.start:
                run = steps[step]
                if run is not None and not (self.stopping and step in AFTER_A_STOP_SKIPPED):
                    await run()
            await self.wait_for_stop(*(task for _, _, task in [*self._public, *private]))
        finally:
            if self._operations is not None:  # no operation starts on a stopping process
                await close_server(self._operations)
            await self.shut_down(shutdown, self._public, private, self._grpc_server)
            self.after_shutdown()
            shutdown.finished()

    async def _private_started(self, private: list[Running]) -> None:
        role = self.role
        here = OperationsHere(self.dataplane, self.changes, self._switch, role.hosted_later)
        self._operations = await serve_calls(bind_unix(role.operations_socket), here.take)
        for what, server, task in private:
            await wait_started(what, server, task, self.settings.host)

    async def _open_public(self) -> None:
        self._public, self._grpc_server = await self.open_public()

    async def _load_models(self) -> None:
        if self.settings.load_models_at_startup:
            await self.dataplane.load_all()

    async def _ready(self) -> None:
        self.mark_ready()

    def after_shutdown(self) -> None:
        """What is left to close once the servers stopped and the models unloaded."""

    def _private_servers(self) -> list[Listening]:
        """The REST app without access rules (nor HTTP statistics: these are the
        supervisor's and tests' requests, not clients') and the metrics exposition,
        each on its own unix socket (the coordinator's operations are served beside
        them, in frames: ``_private_started``)."""
        role = self.role
        apps = [("Private REST server", private_rest_app(self.dataplane), role.rest_socket)]
        if self.settings.metrics_enabled:
            apps.append(("Private metrics server", self.metrics_app(), role.metrics_socket))
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


class ProtocolProcessServer(RoleServer):
    """One of a supervisor's protocol processes: the public ports, shared; what is
    server-wide sent to the coordinator through ``server_wide``."""

    def __init__(
        self, settings: ServerSettings, role: ProtocolProcess, server_wide: ServerWide
    ) -> None:
        super().__init__(settings, role, server_wide, role.queue_bound, role.switch)
        on_demand = self.dataplane.on_demand
        if on_demand is not None:  # a request's load is server-wide
            on_demand.join_processes(server_wide.load_on_request)

    async def open_public(self) -> tuple[list[Running], GrpcServer | None]:
        """The public REST and gRPC ports, shared with the other protocol processes."""
        public = run_servers(self.listen(shared=True))
        grpc_server = self.grpc_server(reuse_port=True)
        await grpc_server.start()
        for what, server, task in public:
            await wait_started(what, server, task, self.settings.host)
        return public, grpc_server
