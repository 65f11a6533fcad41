"""What changes when a server is one of several protocol processes (``protocol_processes`` > 1).

The supervisor (``inferd/supervisor/``) starts each protocol process as a
``ProtocolProcessServer`` (``role_servers.py``: the lone server's parts), given a
``ProtocolProcess`` (``roles.py``), and the model host as the host's
``ModelHostServer`` (``host/process.py``). Then the process:

- serves on a private unix socket (``rest_socket``), in a folder only these
  processes can open, the server-wide operations the supervisor's coordinator sends
  as typed messages (``OPERATION_PATH``: serving/operations.py, applied here alone by
  :class:`OperationsHere`), and its whole REST app without access rules (the
  supervisor's readiness poll, tests asking each process); its metrics exposition
  on another (``metrics_socket``), which the supervisor sums on ``metrics_port``
  (it opens no TCP metrics port itself);
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

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from inferd.errors import InvalidRequest
from inferd.server.errors import http_error
from inferd.server.rest.api import build_rest_app
from inferd.server.rest.fastpath import RestApp
from inferd.server.roles import SwitchBarrier
from inferd.serving.dataplane import DataPlane
from inferd.serving.operations import (
    LOADS,
    Operation,
    RepositoryReload,
    RepositoryRemove,
    decode_operation,
    encode,
    refusal_of,
)
from inferd.serving.repository_poll import ModelChanges
from inferd.serving.server_wide import LocalServerWide

# Where a private socket takes a server-wide operation (serving/operations.py), as a
# msgpack message in a POST body, answered with its value (200) or its Refusal (the
# status the REST edge would have answered): the coordinator's one path into a process.
OPERATION_PATH = "/private/operation"
MSGPACK = "application/msgpack"


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

    async def answer(self, body: bytes) -> tuple[int, bytes]:
        """The status and msgpack body that answer an encoded operation."""
        try:
            operation = _decoded(body)
            return 200, encode(await self.apply(operation))
        except Exception as error:
            status, _, _ = http_error(error, "a server-wide operation")
            return status, encode(refusal_of(error, status))

    def _barrier(self, number: int | None) -> Callable[[], Awaitable[None]] | None:
        if number is None or self.switch is None:
            return None
        await_barrier = self.switch
        return lambda: await_barrier(number)


def _decoded(body: bytes) -> Operation:
    try:
        return decode_operation(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise InvalidRequest(f"Not a server-wide operation: {error}") from None


def private_rest_app(
    dataplane: DataPlane,
    changes: ModelChanges,
    switch: SwitchBarrier | None = None,
    hosted_later: set[str] | None = None,
) -> PrivateRestApp:
    """The app of a protocol process's ``rest-<i>.sock``: the REST app with every API
    group open (the public edge that took a call decided access), not counted in the
    public metrics (its callers are the supervisor and tests, not clients); and the
    coordinator's operations (OPERATION_PATH), applied here alone."""
    rest = build_rest_app(
        dataplane, dataplane.settings, guards={}, server_wide=LocalServerWide(dataplane)
    )
    return PrivateRestApp(rest, OperationsHere(dataplane, changes, switch, hosted_later))


class PrivateRestApp:
    """The REST API, and the server-wide operations the coordinator sends."""

    def __init__(self, rest: RestApp, operations: OperationsHere) -> None:
        self.rest = rest
        self.operations = operations

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != OPERATION_PATH:
            await self.rest(scope, receive, send)
            return
        if scope["method"] != "POST":
            await Response(status_code=405, headers={"allow": "POST"})(scope, receive, send)
            return
        status, body = await self.operations.answer(await Request(scope, receive).body())
        await Response(body, status, media_type=MSGPACK)(scope, receive, send)


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
