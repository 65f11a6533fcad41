"""What changes when a server is one of several protocol processes (``protocol_processes`` > 1).

The supervisor (``inferd/supervisor/``) starts each protocol process as a
``ProtocolProcessServer`` (``role_servers.py``: the lone server's parts), given a
``ProtocolProcess`` (``roles.py``), and the model host as the host's
``ModelHostServer`` (``host/process.py``). Then the process:

- serves on private unix sockets, in a folder only these processes can open, the
  server-wide operations the supervisor's coordinator sends (``operations_socket``:
  a typed message of serving/operations.py per call, in ipc frames,
  workers/private_calls.py; applied here alone by :class:`OperationsHere`), its
  whole REST app without access rules (``rest_socket``: the supervisor's readiness
  poll, tests asking each process) and its metrics exposition (``metrics_socket``),
  which the supervisor sums on ``metrics_port`` (it opens no TCP metrics port itself);
- opens the public REST and gRPC ports with ``SO_REUSEPORT`` (every protocol
  process binds them and the kernel spreads connections). At the server's start it
  opens them before loading its models, as a lone server does: a liveness probe
  answers while a long load runs (all processes load at once, and each is ready
  when its models are). A process restarted after a death opens them last, after
  its models and its catch-up: the others serve meanwhile, and a connection never
  waits on one still starting (``roles.py`` ``start_order``);
- runs in its own pool only the models every protocol process may hold a copy of
  (``backends``, serving/backends.py): the others run in the model host, answered
  through its backend (host/backend.py);
- does not poll the repository (``repository_poll_secs``): the supervisor polls it
  once for every process and sends each change to each on the private socket
  (``RepositoryReload``, ``RepositoryRemove``), where the process applies it as a
  lone server's poller would (serving/repository_poll.py ``LocalChanges``).

The model host is one more process of the same kind (``Role.MODEL_HOST``): it runs
those other models, with the server's own worker settings, and serves them to the
protocol processes on ``host.sock`` (host/edge.py). It opens no public port.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from inferd.errors import InvalidRequest
from inferd.server.errors import portable_error
from inferd.server.rest.api import build_rest_app
from inferd.server.rest.fastpath import RestApp
from inferd.server.roles import SwitchBarrier
from inferd.serving.dataplane import DataPlane
from inferd.serving.operations import (
    LOADS,
    Operation,
    RepositoryReload,
    RepositoryRemove,
)
from inferd.serving.repository_poll import ModelChanges
from inferd.serving.server_wide import LocalServerWide


class OperationsHere:
    """Server-wide operations applied to this process alone: the edges' through
    ``LocalServerWide``, the repository's changes the supervisor's poller found
    through ``changes`` (as a lone server's poller applies them), a reload's new
    instances serving once ``switch`` (the coordinator's barrier) returns."""

    def __init__(
        self,
        dataplane: DataPlane,
        changes: ModelChanges,
        switch: SwitchBarrier | None = None,
        hosted_later: set[str] | None = None,
    ) -> None:
        self.local = LocalServerWide(dataplane)
        self.changes = changes
        self.switch = switch
        self.hosted_later = hosted_later if hosted_later is not None else set()

    async def apply(self, operation: Operation) -> Any:
        if isinstance(operation, LOADS) and operation.hosted:
            # The coordinator's placement, before the load reads it (BackendChoice).
            self.hosted_later.add(operation.name)
        match operation:
            case RepositoryReload(name, number):
                await self.changes.reload(name, self._barrier(number))
            case RepositoryRemove(name):
                await self.changes.remove(name)
            case _:
                return await self.local.apply(operation)
        return None

    async def take(self, message: Any) -> Any:
        """One of the coordinator's calls (workers/private_calls.py): the operation's
        value, or the error that refuses it, as it crosses (``portable_error``)."""
        if not isinstance(message, Operation):
            raise InvalidRequest(f"Not a server-wide operation: {type(message).__name__}")
        try:
            return await self.apply(message)
        except Exception as error:
            raise portable_error(error, "a server-wide operation") from None

    def _barrier(self, number: int | None) -> Callable[[], Awaitable[None]] | None:
        if number is None or self.switch is None:
            return None
        await_barrier = self.switch
        return lambda: await_barrier(number)


def private_rest_app(dataplane: DataPlane) -> RestApp:
    """The app of a process's ``rest-<i>.sock``: the REST app with every API group open
    (the public edge that took a call decided access), not counted in the public
    metrics (its callers are the supervisor's readiness poll and tests, not clients)."""
    return build_rest_app(
        dataplane, dataplane.settings, guards={}, server_wide=LocalServerWide(dataplane)
    )


def bind_unix(path: Path) -> socket.socket:
    """A unix socket bound at ``path`` (not listening yet), replacing the file a
    previous process of the same index left behind when it died."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    return sock
