"""The supervisor: what ``inferd start`` runs when several protocol processes serve.

It holds no client connection. It checks the public ports are free, makes the
private folder (mode 0700, removed when it exits), serves what the server shares
(:class:`Service`s: the coordinator, the summed metrics, the repository poll),
starts the protocol processes (``children.py``), and the model host when a model
loaded at start needs one or, later, when the coordinator asks for it
(:meth:`Supervisor.start_host`: a load needs it), and keeps them running; on
SIGTERM or SIGINT it forwards SIGTERM to each protocol process
(each drains as a lone server does) and, once they have exited, to the host (so
what they forwarded to it is answered), waits for them within
``shutdown_grace_seconds`` and a margin, kills what is left and exits: 0
when every process drained, 1 when one did not (it exited 1 at its deadline, or
was killed), as a lone server exits 1 when its deadline cuts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inferd.errors import ConfigurationError
from inferd.host.placement import Layout, Placement
from inferd.host.process import HostKeeper
from inferd.server.listener import listen_tcp
from inferd.server.roles import HostStart, Role
from inferd.server.shutdown import CUT_SIGNAL, FORCED_EXIT_STATUS
from inferd.settings import ServerSettings
from inferd.supervisor.children import (
    Child,
    ChildProcess,
    describe_exit,
    environment_of_children,
)
from inferd.supervisor.loading import GrpcHealthProcess, fork_grpc_health, loading_service_parts
from inferd.supervisor.paths import PrivatePaths, role_environment
from inferd.supervisor.protocol_forks import EarlyParent, ProtocolForks, fork_parent_early
from inferd.supervisor.served import (
    RunningService,
    Service,
    end_services,
    serve_service,
    stop_services,
)
from inferd.supervisor.strays import keep_reaping_strays

logger = logging.getLogger(__name__)

# Past shutdown_grace_seconds, how long the supervisor still waits for a protocol
# process to exit on its own (its own deadline ends it at the grace) before killing it.
EXIT_MARGIN_SECONDS = 5.0
# inferd start's status when a protocol process did not drain: a lone server's then.
UNDRAINED_EXIT_STATUS = FORCED_EXIT_STATUS


async def _no_host() -> None:
    raise RuntimeError("this supervisor starts no model host")


def _protocol_processes_only() -> bool:
    return False


@dataclass(frozen=True)
class Supervised:
    """What a service is told about the protocol processes it serves beside."""

    paths: PrivatePaths
    count: int
    settings: ServerSettings
    placement: Placement  # where each model loaded at start runs
    host: bool = False  # a model host runs from the start too, as process ``count``
    # Starts the model host (a load needs it) and returns once it is ready.
    start_host: Callable[[], Awaitable[None]] = _no_host
    # Whether the model host runs now (from the start, or started since).
    host_runs: Callable[[], bool] = _protocol_processes_only
    # Set once the supervisor stops: a service's background work ends then.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # The server's processes now, (role, pid): what the memory gauges report.
    pids: Callable[[], list[tuple[str, int]]] = list
    # Awaited once every protocol process has loaded at the start, before any is ready.
    before_ready: Callable[[], Awaitable[None]] | None = None

    def processes(self) -> int:
        """How many processes serve a private REST app now: the protocol processes and
        the host once it runs."""
        return self.count + 1 if self.host or self.host_runs() else self.count


# Where the supervisor's own services plug in: each factory is called once the private
# folder exists and before any protocol process starts (a restarted process may ask
# the coordinator to catch up before it serves). The coordinator (coordinator.sock)
# and the summed metrics (metrics_port) are such services.
ServiceFactory = Callable[[Supervised], Sequence[Service]]


class Supervisor:
    """``count`` protocol processes of the repository at ``repository``."""

    def __init__(
        self,
        settings: ServerSettings,
        repository: Path,
        layout: Layout,
        services: Sequence[ServiceFactory] = (),
    ) -> None:
        """``layout.host_at_start``: run the model host from the start (a model loaded
        at start needs it); else it starts when a load first needs it (:meth:`start_host`).
        ``layout.placement``: where each model loaded at start runs, which the services
        are given (every process reads it from the environment inferd start set)."""
        self.settings = settings
        self.repository = repository
        self.count = layout.processes
        self.host = layout.host_at_start
        self.placement = layout.placement
        # When the model host starts: a fact of the server each process is told.
        self.host_start = HostStart.WITH_SERVER if self.host else HostStart.FOR_A_LOAD
        self._service_factories = list(services)
        self._stopping = asyncio.Event()
        self._protocol: list[Child] = []
        self._host: HostKeeper | None = None  # made with the private folder
        self._forks: ProtocolForks | None = None
        self._loading: RunningService | None = None  # the REST port while loading
        self._loading_grpc: GrpcHealthProcess | None = None  # the gRPC port's health meanwhile
        self._early: EarlyParent | None = None

    def fork_parent_early(self) -> None:
        """Fork the protocol fork parent now, before the event loop (protocol_forks.py):
        it loads the models while the supervisor starts its services; and the process
        answering gRPC health meanwhile (loading.py)."""
        if self.settings.fork_protocol_processes:
            self._early = fork_parent_early(str(self.repository))
            self._loading_grpc = fork_grpc_health(self.settings)

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT, then stop every protocol process; the exit
        status: 0 when each drained, else :data:`UNDRAINED_EXIT_STATUS`."""
        check_public_ports(self.settings)
        # httpx logs each request at INFO: here that is every readiness poll.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        with private_folder() as paths:
            command = [*child_command(), str(self.repository)]
            fork = self._fork_host if self.settings.fork_protocol_processes else None
            self._host = HostKeeper(self.count, command, paths, self.host_start, fork)
            supervised = Supervised(
                paths,
                self.count,
                self.settings,
                self.placement,
                self.host,
                start_host=self.start_host,
                host_runs=lambda: self._host_child() is not None,
                stopping=self._stopping,
                pids=self.pids,
                before_ready=self._stop_loading,
            )
            services = [s for factory in self._service_factories for s in factory(supervised)]
            running = [serve_service(service) for service in services]
            try:
                children = await self._supervise(paths)
            finally:
                # Once the processes have exited, at once: this comes after the grace.
                await asyncio.gather(end_services(running), self._close_forks())
        return exit_status(children)

    async def _close_forks(self) -> None:
        """The protocol fork parent exits (once the protocol processes have)."""
        forks, self._forks = self._forks, None
        if forks is not None:
            await forks.close()

    async def _supervise(self, paths: PrivatePaths) -> list[Child]:
        command = [*child_command(), str(self.repository)]
        # With the host at start, their start-up load binds to it: they wait for its socket.
        environment = {
            **environment_of_children(paths),
            **role_environment(Role.PROTOCOL, self.host_start),
        }
        forks = self._forks = (
            ProtocolForks(str(self.repository), environment, self._early)
            if self.settings.fork_protocol_processes
            else None
        )
        fork = forks.fork if forks is not None else None
        if forks is not None:  # no process has the ports while the parent loads: loading.py
            self._loading = serve_service(Service("Loading", *loading_service_parts(self.settings)))
            if self._loading_grpc is not None:
                self._loading_grpc.start()
        protocol = self._protocol = [
            Child(i, command, environment, paths, fork=fork) for i in range(self.count)
        ]
        kept = [asyncio.create_task(child.keep_running()) for child in protocol]
        if self.host:  # watched as a protocol process is: it cannot start, the server stops
            assert self._host is not None
            kept.append(self._host.start())
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        announced = asyncio.create_task(self._announce(protocol))
        stopping = asyncio.create_task(self._stopping.wait())
        # A subreaper (forks adopts the protocol processes) adopts every orphan below.
        strays = asyncio.create_task(keep_reaping_strays(self._own_pids, self._stopping))
        try:
            await asyncio.wait([stopping, *kept], return_when=asyncio.FIRST_COMPLETED)
            # None, unless one could not start with these settings (or a bug).
            failed = [task for task in kept if task.done()]
            if failed:
                self._stop(protocol, why_stopped(failed[0]))
            await self._wait_for_exits(protocol, kept[: self.count])
            # The host was signalled with them (one deadline for the server: signalled
            # after they exit it got a grace period of its own, and a model still busy
            # at their deadline held the exit to twice shutdown_grace_seconds); its
            # drain answers what they forwarded before, so it is waited for last.
            host, host_kept = self._host_child(), self._host.kept if self._host else None
            if host is not None and host_kept is not None:
                if not host.stopping:  # started while they were stopping
                    host.stop()
                await self._wait_for_exits([host], [host_kept])
            for task in failed:
                await task  # re-raises why it stopped watching its process
            return [*protocol, *([host] if host is not None else [])]
        finally:
            stopping.cancel()
            announced.cancel()
            strays.cancel()
            await self._stop_loading()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    async def _stop_loading(self) -> None:
        loading, self._loading = self._loading, None
        loading_grpc, self._loading_grpc = self._loading_grpc, None
        if loading is not None:
            await stop_services([loading])
        if loading_grpc is not None:
            await loading_grpc.stop()

    def pids(self) -> list[tuple[str, int]]:
        """The server's processes now, by role (the model host's workers are its own)."""
        forks, host = self._forks, self._host_child()
        found: list[tuple[str, int | None]] = [("supervisor", os.getpid())]
        found.append(("protocol_fork_parent", forks.pid if forks else None))
        found += [("protocol_process", c.process.pid) for c in self._protocol if c.process]
        found.append(("model_host", host.process.pid if host and host.process else None))
        return [(role, pid) for role, pid in found if pid is not None]

    def _own_pids(self) -> set[int]:
        """The processes this supervisor started (waited for by their handles)."""
        forks = self._forks
        return {pid for _, pid in self.pids()} | (forks.own_pids() if forks else set())

    async def _fork_host(self, environment: Mapping[str, str]) -> ChildProcess | None:
        """The model host forked by the protocol fork parent; None (then spawned) when
        none runs (protocol_forks.py says why)."""
        forks = self._forks
        return await forks.fork(environment) if forks is not None else None

    def _host_child(self) -> Child | None:
        """The model host's process, once started (with the server, or for a load)."""
        return self._host.child if self._host is not None else None

    async def start_host(self) -> None:
        """Start the model host, for a load of a model that needs it, and return once it
        answers ready (host/process.py ``HostKeeper.start_for_a_load``); RuntimeError
        when it cannot be (the server is stopping, too)."""
        if self._stopping.is_set() or self._host is None:
            raise RuntimeError("the server is stopping")
        await self._host.start_for_a_load()

    def _on_signal(self, signum: int) -> None:
        """Every signal is forwarded as SIGTERM: the first drains each process, a
        second cuts what still runs (as for a lone server)."""
        name = signal.Signals(signum).name
        if not self._stopping.is_set():
            self._stop(self._protocol, f"Received {name}", self._host_child())
        else:
            logger.info("Received %s again: protocol processes stop what still runs", name)
            # CUT_SIGNAL, not SIGTERM: a SIGTERM within SAME_STOP_SECONDS of the first
            # is taken for the same stop (sent by a service manager too).
            host = self._host_child()
            for child in [*self._protocol, *([host] if host else [])]:
                child.signal(CUT_SIGNAL)

    def _stop(self, children: Sequence[Child], why: str, host: Child | None = None) -> None:
        logger.info(
            "%s: stopping %d protocol processes%s (each drains within %gs)",
            why,
            len(children),
            " and the model host" if host is not None else "",
            self.settings.shutdown_grace_seconds,
        )
        self._stopping.set()
        for child in [*children, *([host] if host is not None else [])]:
            child.stop()

    async def _announce(self, protocol: Sequence[Child]) -> None:
        host_child = self._host_child()
        waited = [*protocol, *([host_child] if self.host and host_child else [])]
        await asyncio.gather(*(child.ready.wait() for child in waited))
        host = " and the model host" if self.host else ""
        logger.info("inferd is serving with %d protocol processes%s", self.count, host)

    async def _wait_for_exits(
        self, children: Sequence[Child], kept: Sequence[asyncio.Task[None]]
    ) -> None:
        limit = self.settings.shutdown_grace_seconds + EXIT_MARGIN_SECONDS
        _, pending = await asyncio.wait(kept, timeout=limit)
        if pending:
            logger.error(
                "%d process(es) did not stop within %gs; killing them", len(pending), limit
            )
            for child in children:
                child.signal(signal.SIGKILL)
            await asyncio.wait(pending)


# How a protocol process ends that drained, or had nothing to drain: one still
# starting when the SIGTERM came has not set its handler yet and dies of the signal,
# before it ever took a connection.
DRAINED_EXITS = (None, 0, -signal.SIGTERM)


def exit_status(children: Sequence[Child]) -> int:
    """0 when every protocol process drained (or had not started serving)."""
    undrained = [c for c in children if c.stopped_with not in DRAINED_EXITS]
    for child in undrained:
        assert child.stopped_with is not None
        logger.error("%s did not drain (%s)", child.label, describe_exit(child.stopped_with))
    return UNDRAINED_EXIT_STATUS if undrained else 0


def why_stopped(watch: asyncio.Task[None]) -> str:
    """What the log says when watching a protocol process ended before any signal."""
    if isinstance(watch.exception(), ConfigurationError):
        return "A protocol process could not start"
    return "A protocol process could not be watched"


def child_command() -> list[str]:
    """How a protocol process is started: this interpreter, the child module, and this
    process's pid (the child dies with it)."""
    return [sys.executable, "-m", "inferd.supervisor.child", str(os.getpid())]


def check_public_ports(settings: ServerSettings) -> None:
    """ConfigurationError, before anything starts, when the REST or gRPC port is taken
    (the protocol processes bind them with SO_REUSEPORT, which alone would not say so
    when another server of this user holds them the same way)."""
    host = settings.host
    checks = (
        (settings.http_port, "the REST server", "http_port"),
        (settings.grpc_port, "gRPC", "grpc_port"),
    )
    for port, what, setting in checks:
        if port == 0:
            raise ConfigurationError(
                f"{setting} is 0 (any free port), which several protocol processes cannot "
                f"share: set {setting} to a port, or protocol_processes: 1"
            )
        listen_tcp(host, port, what, f"set {setting} (or host) to a free port").close()


@contextlib.contextmanager
def private_folder() -> Generator[PrivatePaths, None, None]:
    """A folder only this user can open (mkdtemp makes it 0700), removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix="inferd-"))
    try:
        yield PrivatePaths(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_supervisor(supervisor: Supervisor) -> int:
    """Run the supervisor on an event loop (uvloop when installed); its exit status."""
    supervisor.fork_parent_early()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(supervisor.run())
    return uvloop.run(supervisor.run())
