"""Server-wide operations as typed messages: one class per operation.

An edge (REST or gRPC) calls a :class:`~inferd.serving.server_wide.ServerWide`
method; where the operation must hold in every protocol process, that method
becomes one of these messages, which travels to the supervisor's coordinator and
from it to every process, where :func:`~inferd.serving.server_wide.apply` turns it
back into the local call. REST paths and JSON bodies stay at the edges: nothing
between the processes parses a path.

On the wire a message is its instance in one ipc frame (workers/private_calls.py,
the frames of every private channel); an answer is the operation's value (``None``,
the log settings, the statistics) or the error the process raised, rebuilt on the
other side as the same InferdError class (``workers/ipc.py``'s form; one no other
process knows travels as the StatusError REST would answer: server/errors.py
``portable_error``), so both edges answer a forwarded refusal exactly as the local one.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Operation(msgspec.Struct, frozen=True):
    """One server-wide operation."""


class Load(Operation, frozen=True):
    """A repository load (pinned), with Triton's JSON configuration override."""

    name: str
    config: str | None = None
    # The coordinator placed it in the model host: loaded after the start, one copy
    # serves every protocol process (host/placement.py LOADED_LATER).
    hosted: bool = False


class LoadOnRequest(Operation, frozen=True):
    """A request's first use of ``name`` (load_on_request): unpinned, a no-op where it
    is loaded, evicting ``evict`` (the requesting process's choice) if the budget is full."""

    name: str
    evict: str | None = None
    hosted: bool = False  # as Load's


class Unload(Operation, frozen=True):
    name: str


class RepositoryReload(Operation, frozen=True):
    """The supervisor's poll found ``name``'s folders changed or new: serve what they
    hold now. ``switch``: the coordinator's barrier the new instances wait at before
    they serve (None: serve once loaded)."""

    name: str
    switch: int | None = None
    hosted: bool = False  # as Load's


class RepositoryRemove(Operation, frozen=True):
    """The supervisor's poll found no folder of ``name`` any more."""

    name: str


class ChangeLogSettings(Operation, frozen=True):
    """Triton's log settings fields to change; answered with the settings in force."""

    changes: dict[str, Any]


class ChangeTraceSettings(Operation, frozen=True):
    """Triton's trace settings of ``model`` ("": the server's) to change (checked:
    observability/trace_settings.py, None clears one); ``whole``: they are every field
    set for it (a replay). Answered with the settings in force and the fields set."""

    model: str
    changes: dict[str, Any]
    whole: bool = False


class RegisterSystemMemory(Operation, frozen=True):
    name: str
    key: str
    offset: int
    byte_size: int


class RegisterCudaMemory(Operation, frozen=True):
    name: str
    raw_handle: bytes
    device_id: int
    byte_size: int


class UnregisterMemory(Operation, frozen=True):
    """Region ``name`` of ``kind`` (``triton.shm`` SYSTEM or CUDA), None: every one,
    marked unregistered; answered with the names a request still holds, in any process
    (the coordinator joins them). ``drained``: one process's last holder of the
    region let go; it marks nothing new (a region registered again since stays)."""

    kind: str
    name: str | None = None
    drained: bool = False


class DropMemory(Operation, frozen=True):
    """The regions an :class:`UnregisterMemory` marked dropped, but those in ``keep``
    (held in some process): what unregistering does once it knows which are held."""

    kind: str
    name: str | None = None
    keep: list[str] = []


class ReadStatistics(Operation, frozen=True):
    """Triton's statistics of every model, of ``name``, or of one version of it."""

    name: str | None = None
    version: str | None = None


# What loads a model (a protocol process binds to what the host has loaded: the host
# goes first) and what unloads one (the protocol processes stop sending first).
LOADS = (Load, LoadOnRequest, RepositoryReload)
UNLOADS = (Unload, RepositoryRemove)


def model_of(operation: Operation) -> str | None:
    """The model an operation loads or unloads; None for any other."""
    if isinstance(operation, LOADS + UNLOADS):
        return operation.name
    return None
