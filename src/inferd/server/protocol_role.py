"""What changes when a server is one of several protocol processes (``protocol_processes`` > 1).

The supervisor (``inferd/supervisor/``) starts each protocol process as a whole
:class:`~inferd.server.app.InferenceServer` given a :class:`ProtocolProcess`. Then the
server:

- serves its whole REST app, without access rules, on a private unix socket
  (``rest_socket``) as well: the supervisor's coordinator applies server-wide
  operations in every process through it, and only these processes can open the
  folder it is in; and its metrics exposition on another (``metrics_socket``), which
  the supervisor sums on ``metrics_port`` (it opens no TCP metrics port itself);
- opens the public REST and gRPC ports with ``SO_REUSEPORT`` (every protocol
  process binds them and the kernel spreads connections). At the server's start
  (``open_ports_first``) it opens them before loading its models, as a lone server
  does: a liveness probe answers while a long load runs (all processes load at once,
  and each is ready when its models are). A process restarted after a death opens
  them last, after its models and ``before_public`` (where it catches up): the
  others serve meanwhile, and a connection never waits on one still starting;
- runs in its own pool only the models every protocol process may hold a copy of
  (``placement``, serving/placement.py): the others run in the model host;
- does not poll the repository (``repository_poll_secs``): the supervisor polls it
  once for every process and sends each change to each on the private socket
  (``REPOSITORY_CHANGE``), where the process applies it as a lone server's poller
  would (serving/repository_poll.py ``LocalChanges``).

The model host is one more process of the same kind (``host_socket`` set): a whole
server that runs those other models, with the server's own worker settings, and
serves them to the protocol processes on ``host_socket`` (server/host_edge.py). It
opens no public port.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from inferd.server.rest.api import build_rest_app
from inferd.server.rest.fastpath import RestApp
from inferd.serving.dataplane import DataPlane
from inferd.serving.placement import Placement
from inferd.serving.repository_poll import ModelChanges
from inferd.serving.server_wide import LocalServerWide

# Where a private socket takes a change of the repository the supervisor's poller
# found: POST {REPOSITORY_CHANGE}/{name}/reload (serve what its folders hold now) or
# /remove (no folder holds it any more). Answered once applied here. A reload's
# ?switch=<id> has its new instances serve only once ProtocolProcess.switch(id)
# returns: the coordinator's barrier, passed when every process has loaded them.
REPOSITORY_CHANGE = "/private/repository/models"
_CHANGE = re.compile(re.escape(REPOSITORY_CHANGE) + r"/(?P<name>[^/]+)/(?P<action>reload|remove)")


@dataclass(frozen=True)
class ProtocolProcess:
    """What makes an InferenceServer one of a supervisor's protocol processes."""

    rest_socket: Path
    metrics_socket: Path
    placement: Placement
    # Awaited after the models loaded, before the process is ready (and, unless
    # open_ports_first, before the public ports open).
    before_public: Callable[[], Awaitable[None]] | None = None
    # At the server's start: public ports before the models load (live meanwhile).
    open_ports_first: bool = False
    # The model host: serves its models to the protocol processes here, no public port.
    host_socket: Path | None = None
    # The queue bound of a model this process runs that sets none: its share of the
    # server's max_queue_size (supervisor/placement.py queue_share); None: the server's.
    queue_bound: int | None = None
    # Whether it loads the repository's models at its start (load_models_at_startup
    # permitting): not a model host started later, for a load (it catches up instead).
    models_at_start: bool = True
    # Awaits the coordinator's switch barrier of that id (a repository reload's); None:
    # a reload serves its new instances as soon as they are loaded.
    switch: Callable[[str], Awaitable[None]] | None = None
    # A protocol process serves its dataplane here to the model host's model calls
    # (server/worker_calls.py); the host calls at these the models it does not hold.
    calls_socket: Path | None = None
    calls_elsewhere: tuple[Path, ...] = ()


def private_rest_app(
    dataplane: DataPlane,
    changes: ModelChanges,
    switch: Callable[[str], Awaitable[None]] | None = None,
) -> PrivateRestApp:
    """The REST app of a protocol process's ``rest-<i>.sock``: every API group open
    (the public edge that took a call decided access), operations applied to this
    process alone, not counted in the public metrics (the coordinator's calls are
    not clients'); and the repository's changes, applied to ``changes`` (a reload's
    switch awaited with ``switch``)."""
    rest = build_rest_app(
        dataplane, dataplane.settings, guards={}, server_wide=LocalServerWide(dataplane)
    )
    return PrivateRestApp(rest, changes, switch)


class PrivateRestApp:
    """The REST API, and the repository changes the supervisor's poller sends."""

    def __init__(
        self,
        rest: RestApp,
        changes: ModelChanges,
        switch: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.rest = rest
        self.changes = changes
        self.switch = switch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _repository_change(scope)
        if found is None:
            await self.rest(scope, receive, send)
            return
        name, action = found
        if action == "reload":
            await self.changes.reload(name, self._switch_of(scope))
        else:
            await self.changes.remove(name)
        await Response(b"{}", 200, media_type="application/json")(scope, receive, send)

    def _switch_of(self, scope: Scope) -> Callable[[], Awaitable[None]] | None:
        """The reload's switch: the barrier its ``?switch=<id>`` names, when this
        process has a way to await one."""
        barrier = parse_qs(scope.get("query_string", b"").decode()).get("switch")
        if not barrier or self.switch is None:
            return None
        await_barrier, barrier_id = self.switch, barrier[0]
        return lambda: await_barrier(barrier_id)


def _repository_change(scope: Scope) -> tuple[str, str] | None:
    """The model and the action (reload, remove) of a repository change; None for any
    other request. The name is read from the raw path, where it is percent-encoded
    (it may hold a slash)."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    raw = scope.get("raw_path")
    found = _CHANGE.fullmatch(raw.decode("ascii") if raw else scope["path"])
    return None if found is None else (unquote(found["name"]), found["action"])


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
