"""Where the supervisor and its protocol processes find each other.

One private folder per ``inferd start`` (mode 0700, made by the supervisor, removed
when it exits) holds unix sockets only these processes may open:

- ``coordinator.sock`` — the supervisor's coordinator: server-wide operations
  (repository load/unload, log level, shared memory registration, statistics)
  sent by a protocol process, applied in every protocol process before answering;
- ``operations-<i>.sock`` — protocol process ``i``'s side of the coordinator: the
  operations the coordinator sends it, applied there alone (both in ipc frames, a call
  per connection: workers/private_calls.py);
- ``rest-<i>.sock`` — protocol process ``i``'s own REST app, answering for that
  process alone (the supervisor's readiness poll, tests);
- ``metrics-<i>.sock`` — protocol process ``i``'s Prometheus exposition (the
  supervisor serves ``metrics_port`` by summing them);
- ``host.sock`` — the model host's models (when one runs), which every protocol
  process reaches there (host/client.py); the host is also process ``N`` (after
  the N protocol processes) for its ``operations-N.sock``, ``rest-N.sock`` and
  ``metrics-N.sock``;
- ``calls-<i>.sock`` — protocol process ``i``'s models, for the model calls of the
  models the host runs (server/worker_calls.py).

Each process knows the folder, its index and its role from the environment
(``INFERD_PRIVATE_DIR``, ``INFERD_PROTOCOL_INDEX``, ``INFERD_ROLE``: server/roles.py
``Role``), set by the supervisor, and when the model host starts
(``INFERD_HOST_START``: ``HostStart``, the same for every process).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inferd.server.roles import HostStart, Role, Step, start_order

PRIVATE_DIR_ENV = "INFERD_PRIVATE_DIR"
PROTOCOL_INDEX_ENV = "INFERD_PROTOCOL_INDEX"
# Set ("1") for a process started again after a death: it joins processes that serve.
RESTARTED_ENV = "INFERD_PROTOCOL_RESTARTED"
# What the process is (a Role's value).
ROLE_ENV = "INFERD_ROLE"
# When the model host starts (a HostStart's value): told to every process.
HOST_START_ENV = "INFERD_HOST_START"


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

    def operations(self, index: int) -> Path:
        return self.folder / f"operations-{index}.sock"

    @property
    def host(self) -> Path:
        return self.folder / "host.sock"

    def calls(self, index: int) -> Path:
        return self.folder / f"calls-{index}.sock"


@dataclass(frozen=True)
class ProcessRole:
    """What a process is told by its supervisor."""

    paths: PrivatePaths
    index: int
    role: Role
    host_start: HostStart  # when the model host starts, for the whole server
    restarted: bool = False  # started again after a death (not at the server's start)

    def start_order(self) -> tuple[Step, ...]:
        return start_order(self.role, self.host_start, self.restarted)


def role_environment(role: Role, host_start: HostStart) -> dict[str, str]:
    """What tells a process its role (with environment_of_children's folder)."""
    return {ROLE_ENV: role.value, HOST_START_ENV: host_start.value}


def process_role(environ: os._Environ[str] | dict[str, str] = os.environ) -> ProcessRole | None:
    """This process's role when a supervisor started it, else None (a lone server)."""
    folder = environ.get(PRIVATE_DIR_ENV)
    index = environ.get(PROTOCOL_INDEX_ENV)
    if not folder or index is None:
        return None
    return ProcessRole(
        PrivatePaths(Path(folder)),
        int(index),
        Role(environ[ROLE_ENV]),
        HostStart(environ[HOST_START_ENV]),
        restarted=environ.get(RESTARTED_ENV) == "1",
    )
