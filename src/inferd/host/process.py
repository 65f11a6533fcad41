"""The model host process: its server, how it is made from its role, and how the
supervisor starts it (:class:`HostKeeper`).

A whole server (the lone server's parts, ``server/parts.py``, served as a
``server/role_servers.py`` ``RoleServer``) that opens no public port: it serves its
models to the protocol processes on ``host.sock`` (``edge.py``). What is
server-wide reaches it from the coordinator only (it takes no client's operation),
and it loads what it is told, evicting nothing itself. It runs the models the
placement hosts (``placement.py``, decided once by inferd start), with the server's
worker settings, and those the coordinator placed in it when they were loaded
after the start (``on_demand.py``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from inferd.host.edge import close_host, serve_host
from inferd.host.placement import Placement, why_not_replicated
from inferd.server.grpc.server import GrpcServer
from inferd.server.http_servers import Running
from inferd.server.protocol_role import bind_unix
from inferd.server.role_servers import RoleServer
from inferd.server.roles import HostStart, Role, RoleProcess
from inferd.serving.backends import BackendChoice
from inferd.settings import ModelSettings, ServerSettings
from inferd.supervisor.children import Child, Fork, environment_of_children
from inferd.supervisor.forwarding import catch_up
from inferd.supervisor.paths import PrivatePaths, ProcessRole, role_environment

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelHostProcess(RoleProcess):
    """What makes a server the model host: the socket it serves its models on."""

    host_socket: Path = field(kw_only=True)


class ModelHostServer(RoleServer):
    """The model host: its models served to the protocol processes on ``host.sock``
    (``role.host_socket``); no public port, no operation of its own to forward."""

    def __init__(self, settings: ServerSettings, role: ModelHostProcess) -> None:
        super().__init__(settings, role, None)
        self.host_socket = role.host_socket
        self._host: asyncio.Server | None = None
        on_demand = self.dataplane.on_demand
        if on_demand is not None:  # it loads what it is told and evicts nothing
            on_demand.join_processes(None)

    async def open_public(self) -> tuple[list[Running], GrpcServer | None]:
        """``host.sock`` (at a restart after its models, as ports: a protocol process
        reconnecting then finds a host that answers, or none, never one whose load
        would hold its requests)."""
        self._host = await serve_host(self.dataplane, bind_unix(self.host_socket), self.pool)
        return [], None

    def after_shutdown(self) -> None:
        # Its calls are answered (drained): the protocol processes, stopped with it,
        # take the end of their connections as expected (client.py server_stopping).
        if self._host is not None:
            close_host(self._host)


def host_server(
    settings: ServerSettings, role: ProcessRole, placement: Placement
) -> ModelHostServer:
    """The model host's server: the models the placement hosts (decided once, by
    inferd start), run as a lone server runs them (its worker settings), and those
    the coordinator placed here when they were loaded after the start: in its
    workers when their settings ask for what one copy gives (the rules, read for
    that load), else in its own process; served on ``host.sock``. What is
    server-wide reaches it from the coordinator, and it catches up on it as a
    protocol process does (it waits for no one: it is not public)."""

    async def catch_up_with_the_others() -> None:
        outcome = await catch_up(role)
        if outcome.get("applied"):
            logger.info("Caught up with the protocol processes: %s", outcome)

    hosted_later: set[str] = set()  # the models the coordinator placed here since

    def here(model: ModelSettings) -> bool:
        if placement.hosts(model):
            return True
        return model.name in hosted_later and why_not_replicated(model, settings) is not None

    def in_process(model: ModelSettings) -> bool:
        # Loaded after the start: in the host's own process, as each protocol process
        # would have run its copy (no worker to start, no second hop).
        return model.name in hosted_later

    process = ModelHostProcess(
        rest_socket=role.paths.rest(role.index),
        metrics_socket=role.paths.metrics(role.index),
        operations_socket=role.paths.operations(role.index),
        backends=BackendChoice(here=here, in_process=in_process),
        hosted_later=hosted_later,
        # At the server's start host.sock opens first: the protocol processes' loads
        # wait there for the host's. Restarted, it opens once its models are loaded.
        # Started for a load: the models it runs are those the coordinator has
        # applied (its journal, then that load), none of its own from the repository.
        start=role.start_order(),
        catch_up=catch_up_with_the_others,
        host_socket=role.paths.host,
        # Its models call the others in a protocol process (it is process N, after them).
        calls_elsewhere=tuple(role.paths.calls(index) for index in range(role.index)),
    )
    return ModelHostServer(settings, process)


# How long a load that starts the model host waits for it to answer ready (it loads
# no model of its own then: an import and the journal's replay).
HOST_START_SECONDS = 120.0


class HostKeeper:
    """The supervisor's side of the model host (process ``index``, after the
    protocol processes): started with them when a model loaded at start needs it
    (:meth:`start`), else for the load that first needs it (:meth:`start_for_a_load`);
    kept running as they are (restarted when it dies, children.py). Forked from the
    protocol fork parent as they are (``fork``), when one runs: it shares the imported
    modules' pages with them instead of importing the stack again; else spawned."""

    def __init__(
        self,
        index: int,
        command: list[str],
        paths: PrivatePaths,
        host_start: HostStart,
        fork: Fork | None = None,
    ) -> None:
        self._index, self._command, self._paths = index, command, paths
        self._host_start = host_start
        self._fork = fork
        self.child: Child | None = None
        self.kept: asyncio.Task[None] | None = None  # its watch (keep_running)

    def start(self) -> asyncio.Task[None]:
        """Start the host and keep it running; its watch."""
        environment = {
            **environment_of_children(self._paths),
            **role_environment(Role.MODEL_HOST, self._host_start),
        }
        self.child = Child(
            self._index, self._command, environment, self._paths, "The model host", self._fork
        )
        self.kept = asyncio.create_task(self.child.keep_running())
        return self.kept

    async def start_for_a_load(self) -> None:
        """Start the host for a load that needs it, and return once it answers ready
        (at once when it runs); RuntimeError when it exited, or did not become ready
        within HOST_START_SECONDS."""
        if self.child is None or (self.kept is not None and self.kept.done()):
            logger.info("Starting the model host: a model loaded now runs in it")
            self.start()
        child, kept = self.child, self.kept
        assert child is not None and kept is not None
        ready = asyncio.create_task(child.ready.wait())
        done, _ = await asyncio.wait(
            [ready, kept], timeout=HOST_START_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
        if ready in done:
            return
        ready.cancel()
        if kept in done and kept.exception() is not None:
            raise RuntimeError(str(kept.exception()))
        raise RuntimeError(f"it did not answer ready within {HOST_START_SECONDS:g}s (see the log)")
