"""A protocol process: ``python -m inferd.supervisor.child SUPERVISOR_PID MODEL_REPOSITORY``.

Started by the supervisor (``main.py``), with ``INFERD_PRIVATE_DIR`` and
``INFERD_PROTOCOL_INDEX`` set. It reads the server settings the way ``inferd
start`` did (the same files, the same environment) and runs a whole
InferenceServer in its protocol role (server/protocol_role.py) whose models run in
this process (``parallel_workers: 0``): every model here is loaded once per
protocol process, which placement.py allows only for models that can be.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path

from inferd.errors import ConfigurationError
from inferd.observability.logs import configure_logging, tag_process
from inferd.server.app import InferenceServer
from inferd.server.protocol_role import ProtocolProcess
from inferd.settings import ServerSettings
from inferd.settings.loader import load_server_settings
from inferd.supervisor.children import CONFIGURATION_EXIT_STATUS
from inferd.supervisor.forwarding import ForwardingServerWide, catch_up
from inferd.supervisor.paths import ProtocolRole, protocol_role
from inferd.supervisor.placement import refuse_unreplicated
from inferd.workers.worker import die_with_parent

logger = logging.getLogger(__name__)


def protocol_settings(settings: ServerSettings) -> ServerSettings:
    """A protocol process's settings: the server's, its models run in this process."""
    return settings.model_copy(update={"parallel_workers": 0})


def protocol_server(settings: ServerSettings, role: ProtocolRole) -> InferenceServer:
    """The InferenceServer of protocol process ``role.index``: what is server-wide it
    sends to the coordinator, and once its models loaded, before its public ports
    open, it catches up on what the others were told (a process restarted after a
    death, or one slower to start than a client's load)."""

    async def catch_up_with_the_others() -> None:
        outcome = await catch_up(role)
        if outcome.get("applied"):
            logger.info("Caught up with the other protocol processes: %s", outcome)

    process = ProtocolProcess(
        rest_socket=role.paths.rest(role.index),
        metrics_socket=role.paths.metrics(role.index),
        refuse_load=refuse_unreplicated,
        before_public=catch_up_with_the_others,
        open_ports_first=not role.restarted,
    )
    server = InferenceServer(protocol_settings(settings), process)
    server.server_wide = ForwardingServerWide(role.paths.coordinator)
    return server


def main(argv: list[str] | None = None) -> None:
    supervisor_pid, repository = (argv or sys.argv[1:])[:2]
    die_with_parent(int(supervisor_pid))
    # A Ctrl-C reaches the whole process group: the supervisor forwards it as SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    role = protocol_role()
    if role is None:
        sys.exit("inferd.supervisor.child is started by `inferd start`, which sets its role")
    try:
        settings = load_server_settings(Path(repository))
        configure_logging(settings)
        tag_process("protocol process", role.index)
        # httpx logs each request at INFO: here each call to the coordinator.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        _run(protocol_server(settings, role).run())
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
