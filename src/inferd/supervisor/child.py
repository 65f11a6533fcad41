"""A protocol process, or the model host: ``python -m inferd.supervisor.child
SUPERVISOR_PID MODEL_REPOSITORY``.

Started by the supervisor (``main.py``), or forked from the protocol fork parent
(``protocol_parent.py``, which then calls :func:`serve_role`), with ``INFERD_PRIVATE_DIR``,
``INFERD_PROTOCOL_INDEX``, ``INFERD_ROLE`` and ``INFERD_HOST_START`` set (paths.py).
It reads the server settings the way ``inferd start`` did (the same files, the
same environment) and runs a whole server in its role (server/role_servers.py:
a ``ProtocolProcessServer``, or the model host's ``host/process.py``
``ModelHostServer``). A protocol process's own models run in it
(``parallel_workers: 0``): the models the placement copies (host/placement.py,
decided once by inferd start, read from the environment), with the process's
share of the server's ``max_queue_size`` (those the fork parent loaded before
forking this process are adopted, workers/preloaded.py; the others load here);
the others it reaches in the model host (host/backend.py), which the coordinator
starts before such a load when none runs yet, and those the coordinator placed
there when they were loaded after the start (a load marked ``hosted``: one copy
for every process). The model host runs exactly those, with the server's worker
settings, and opens no public port.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable
from functools import partial
from pathlib import Path

from inferd.errors import ConfigurationError
from inferd.host.backend import HostBackend
from inferd.host.client import HostClient
from inferd.host.placement import Placement, queue_share
from inferd.host.process import host_server
from inferd.observability.logs import configure_logging, speak_for_server, tag_process
from inferd.server.role_servers import ProtocolProcessServer, RoleServer
from inferd.server.roles import HostStart, ProtocolProcess, Role
from inferd.server.shutdown import exit_stopped
from inferd.serving.backends import BackendChoice
from inferd.settings import ModelSettings, ServerSettings
from inferd.settings.command_line import CommandLine
from inferd.settings.loader import load_server_settings
from inferd.supervisor.children import CONFIGURATION_EXIT_STATUS
from inferd.supervisor.forwarding import (
    ForwardingServerWide,
    catch_up,
    switch_together,
    wait_for_every_process,
)
from inferd.supervisor.paths import ProcessRole, process_role
from inferd.workers import oom_score
from inferd.workers.worker import die_with_parent

logger = logging.getLogger(__name__)


def protocol_settings(settings: ServerSettings) -> ServerSettings:
    """A protocol process's settings: the server's, its models run in this process."""
    return settings.model_copy(update={"parallel_workers": 0})


def protocol_server(
    settings: ServerSettings, role: ProcessRole, placement: Placement
) -> ProtocolProcessServer:
    """The server of protocol process ``role.index``: what is server-wide it
    sends to the coordinator, and once its models loaded, before it is ready, it
    catches up on what the others were told (a process restarted after a death, or
    one slower to start than a client's load) and waits until every process has
    loaded (at the server's start no process says ready before the others)."""

    async def catch_up_with_the_others() -> None:
        outcome = await catch_up(role)
        if outcome.get("applied"):
            logger.info("Caught up with the other protocol processes: %s", outcome)
        # Ready only once every process is (at the server's start they load together).
        await wait_for_every_process(role)

    hosted_later: set[str] = set()  # the coordinator's placement of later loads
    process = ProtocolProcess(
        rest_socket=role.paths.rest(role.index),
        metrics_socket=role.paths.metrics(role.index),
        operations_socket=role.paths.operations(role.index),
        backends=protocol_backends(settings, role, placement, hosted_later),
        hosted_later=hosted_later,
        # Its share of the server's bound: at most max_queue_size requests of a copied
        # model wait in the whole server.
        queue_bound=queue_share(settings.max_queue_size, settings.protocol_processes),
        start=role.start_order(),
        catch_up=catch_up_with_the_others,
        switch=partial(switch_together, role),
        calls_socket=role.paths.calls(role.index),  # the host's models call its models
    )
    forwarding = ForwardingServerWide(role.paths.coordinator)
    server = ProtocolProcessServer(protocol_settings(settings), process, forwarding)
    host = process.backends.elsewhere
    if isinstance(host, HostBackend):  # the host gives up a version: here too
        host.client.on_instance_failed(server.registry.instance_failed)
        # The supervisor stops the host with this process: its connection's loss is
        # expected from then on (its calls were answered: the host drains them first).
        server.when_stopping(host.client.server_stopping)
    return server


def protocol_backends(
    settings: ServerSettings, role: ProcessRole, placement: Placement, hosted_later: set[str]
) -> BackendChoice:
    """A protocol process runs the models the placement copies (decided once, by
    inferd start), unless the coordinator placed them in the model host when they
    were loaded again after the start (``hosted_later``: one copy for every
    process); the others run in the host, reached (connected) when a load first
    binds one: the host may start after this process, when the coordinator starts
    it for that load."""

    def here(model: ModelSettings) -> bool:
        return placement.copies(model) and model.name not in hosted_later

    # As many calls may wait for a restarting host as requests may wait here.
    waiting = queue_share(settings.max_queue_size, settings.protocol_processes) or None
    with_server = role.host_start is HostStart.WITH_SERVER  # its socket is waited for
    host = HostClient(role.paths.host, with_server, most_waiting=waiting)
    return BackendChoice(here=here, elsewhere=HostBackend(host))


def main(argv: list[str] | None = None) -> None:
    supervisor_pid, repository = (argv or sys.argv[1:])[:2]
    die_with_parent(int(supervisor_pid))
    serve_role(Path(repository))
    exit_stopped(0)  # a spawned model host or protocol process: no slow finalization


def serve_role(repository: Path, forked: bool = False) -> None:
    """Serve in the role the environment gives (a process spawned by the supervisor,
    or ``forked`` by the protocol fork parent); exits when the server stops."""
    # A Ctrl-C reaches the whole process group: the supervisor forwards it as SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    role = process_role()
    if role is None:
        sys.exit("inferd.supervisor.child is started by `inferd start`, which sets its role")
    spawned = oom_score.FORKED if forked else oom_score.SPAWNED
    is_host = role.role is Role.MODEL_HOST
    oom_score.take_role(oom_score.MODEL_HOST if is_host else spawned)
    try:
        settings = load_server_settings(repository, command_line=CommandLine.from_environment())
        configure_logging(settings)
        if is_host:
            tag_process("model host", role.index)
        else:
            tag_process("protocol process", role.index)
        # The server's events are told once, by protocol process 0 (a hosted model's
        # too: it binds every one); the others' lines of them are detail (DEBUG).
        # Restarted, it tells nothing of its own start: the others served meanwhile.
        speak_for_server(role.index == 0 and not is_host, once_ready=role.restarted)
        # httpx logs each request at INFO: here each call to the coordinator.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        placement = Placement.from_environment()  # inferd start's, decided once
        server: RoleServer = (
            host_server(settings, role, placement)
            if is_host
            else protocol_server(settings, role, placement)
        )
        _run(server.run())
    except ConfigurationError as error:
        print(f"Error: {error}", file=sys.stderr)
        sys.exit(CONFIGURATION_EXIT_STATUS)


def _run(serving: Awaitable[None]) -> None:
    async def serve() -> None:
        await serving

    try:
        import uvloop
    except ImportError:
        asyncio.run(serve())
    else:
        uvloop.run(serve())


if __name__ == "__main__":
    main()
