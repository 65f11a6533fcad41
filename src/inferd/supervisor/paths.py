"""Where the supervisor and its protocol processes find each other.

One private folder per ``inferd start`` (mode 0700, made by the supervisor, removed
when it exits) holds unix sockets only these processes may open:

- ``coordinator.sock`` — the supervisor's coordinator: server-wide operations
  (repository load/unload, log level, shared memory registration, statistics)
  sent by a protocol process, applied in every protocol process before answering;
- ``rest-<i>.sock`` — protocol process ``i``'s own REST app, answering for that
  process alone (the coordinator fans out through these);
- ``metrics-<i>.sock`` — protocol process ``i``'s Prometheus exposition (the
  supervisor serves ``metrics_port`` by summing them);
- ``host.sock`` — the model host's models (when one runs), which every protocol
  process reaches there (host/client.py); the host is also process ``N`` (after
  the N protocol processes) for its ``rest-N.sock`` and ``metrics-N.sock``;
- ``calls-<i>.sock`` — protocol process ``i``'s models, for the model calls of the
  models the host runs (server/worker_calls.py).

A protocol process knows the folder and its index from the environment
(``INFERD_PRIVATE_DIR``, ``INFERD_PROTOCOL_INDEX``), set by the supervisor; the
model host is told that it is the host, and whether it was started with the server
or later, when a load first needed it (``INFERD_MODEL_HOST``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PRIVATE_DIR_ENV = "INFERD_PRIVATE_DIR"
PROTOCOL_INDEX_ENV = "INFERD_PROTOCOL_INDEX"
# Set ("1") for a process started again after a death: it joins processes that serve.
RESTARTED_ENV = "INFERD_PROTOCOL_RESTARTED"
# In the model host: "start" when it started with the server (a model loaded at start
# needed it), "later" when the coordinator started it for a load; "peer" in the
# protocol processes when it starts with them (their start-up load waits for it).
MODEL_HOST_ENV = "INFERD_MODEL_HOST"
HOST_AT_START = "start"
HOST_LATER = "later"
HOST_PEER = "peer"


@dataclass(frozen=True)
class PrivatePaths:
    """The sockets of one supervisor's private folder."""

    folder: Path

    @property
    def coordinator(self) -> Path:
        return self.folder / "coordinator.sock"

    def rest(self, index: int) -> Path:
        return self.folder / f"rest-{index}.sock"

    def metrics(self, index: int) -> Path:
        return self.folder / f"metrics-{index}.sock"

    @property
    def host(self) -> Path:
        return self.folder / "host.sock"

    def calls(self, index: int) -> Path:
        return self.folder / f"calls-{index}.sock"


@dataclass(frozen=True)
class ProtocolRole:
    """What a protocol process is told by its supervisor."""

    paths: PrivatePaths
    index: int
    restarted: bool = False  # started again after a death (not at the server's start)
    is_host: bool = False  # this process is the model host
    # The host started later, for a load: it loads no model of its own at its start,
    # only what the coordinator applied (its journal) and applies from then on.
    host_started_later: bool = False
    # A protocol process whose model host starts with it (a model loaded at start needs it).
    host_at_start: bool = False


def protocol_role(environ: os._Environ[str] | dict[str, str] = os.environ) -> ProtocolRole | None:
    """This process's role when a supervisor started it, else None (a lone server)."""
    folder = environ.get(PRIVATE_DIR_ENV)
    index = environ.get(PROTOCOL_INDEX_ENV)
    if not folder or index is None:
        return None
    restarted = environ.get(RESTARTED_ENV) == "1"
    host = environ.get(MODEL_HOST_ENV, "")
    return ProtocolRole(
        PrivatePaths(Path(folder)),
        int(index),
        restarted,
        is_host=host in (HOST_AT_START, HOST_LATER),
        host_started_later=host == HOST_LATER,
        host_at_start=host == HOST_PEER,
    )
