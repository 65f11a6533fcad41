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
  process reaches there (workers/hosted.py); the host is also process ``N`` (after
  the N protocol processes) for its ``rest-N.sock`` and ``metrics-N.sock``.

A protocol process knows the folder and its index from the environment
(``INFERD_PRIVATE_DIR``, ``INFERD_PROTOCOL_INDEX``), and whether a model host
runs and which process is it (``INFERD_MODEL_HOST``), set by the supervisor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PRIVATE_DIR_ENV = "INFERD_PRIVATE_DIR"
PROTOCOL_INDEX_ENV = "INFERD_PROTOCOL_INDEX"
# Set ("1") for a process started again after a death: it joins processes that serve.
RESTARTED_ENV = "INFERD_PROTOCOL_RESTARTED"
# "peer" in the protocol processes when a model host runs, "self" in the host.
MODEL_HOST_ENV = "INFERD_MODEL_HOST"


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


@dataclass(frozen=True)
class ProtocolRole:
    """What a protocol process is told by its supervisor."""

    paths: PrivatePaths
    index: int
    restarted: bool = False  # started again after a death (not at the server's start)
    host_runs: bool = False  # a model host serves the models no protocol process copies
    is_host: bool = False  # this process is that host


def protocol_role(environ: os._Environ[str] | dict[str, str] = os.environ) -> ProtocolRole | None:
    """This process's role when a supervisor started it, else None (a lone server)."""
    folder = environ.get(PRIVATE_DIR_ENV)
    index = environ.get(PROTOCOL_INDEX_ENV)
    if not folder or index is None:
        return None
    restarted = environ.get(RESTARTED_ENV) == "1"
    host = environ.get(MODEL_HOST_ENV, "")
    return ProtocolRole(
        PrivatePaths(Path(folder)), int(index), restarted, host in ("peer", "self"), host == "self"
    )
