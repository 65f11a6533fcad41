"""What the coordinator has applied server-wide, for a protocol process that starts later.

A protocol process that is restarted (or starts after the others took operations)
begins as the repository and its settings make it: the models loaded at start-up,
the configured log level, no shared memory region. The journal holds the typed
operations (serving/operations.py) that bring it to where the others are, one per
key, in the order they were last applied:

- a model's last ``Load`` (with its configuration override) or ``Unload``, or the
  last change of its folders the repository poll applied (``RepositoryReload``,
  ``RepositoryRemove``): an unload is kept, since a process that loads its models
  at start-up has to unload it again; a ``LoadOnRequest`` is not: a process that
  starts loads such a model on its own first request for it, as the others did;
- the log settings in force, as a whole (Triton's fields): each change applies to
  what is in force, so only the last answer says what the changes came to;
- the trace settings of the server and of each model: the fields set for each, as
  a whole (those not set keep following the server's, or its start);
- each shared memory region still registered; an unregister forgets the region
  (a process that starts has none, not even one that still drains elsewhere), and
  unregistering every region of a kind forgets every one of that kind.

Keys are independent of each other (a model, the logging, a region), so replaying
the last operation of each, in the order they were last applied, gives the state
the whole sequence gave.
"""

from __future__ import annotations

from typing import Any

import msgspec

from inferd.serving.operations import (
    ChangeLogSettings,
    ChangeTraceSettings,
    DropMemory,
    LoadOnRequest,
    Operation,
    RegisterCudaMemory,
    RegisterSystemMemory,
    RepositoryReload,
    UnregisterMemory,
    model_of,
)
from inferd.triton.shm import CUDA, SYSTEM

MODEL = "model"
LOGGING = "logging"
TRACING = "tracing"

# What a journal entry is about: (MODEL, name), (LOGGING, ""), (TRACING, model or ""),
# or (kind, region) with kind triton.shm's SYSTEM or CUDA.
Key = tuple[str, str]


class Journal:
    """The last operation applied for each key, oldest first."""

    def __init__(self) -> None:
        self._operations: dict[Key, Operation] = {}

    def applied(self, operation: Operation, value: Any) -> None:
        """Note that ``operation`` (a server-wide one) was applied, answering ``value``."""
        match operation:
            case ChangeLogSettings():
                self._record((LOGGING, ""), ChangeLogSettings(value))  # the whole, in force
            case ChangeTraceSettings(scope):
                # The fields set for that scope, as a whole: unset ones keep following.
                self._record((TRACING, scope), ChangeTraceSettings(scope, value["set"], True))
            case LoadOnRequest():
                pass  # loaded again by a process that starts, on its own first request
            case RepositoryReload():
                # A process that replays it switches when its own load ends.
                unbarriered = msgspec.structs.replace(operation, switch=None)
                self._record((MODEL, operation.name), unbarriered)
            case RegisterSystemMemory(name):
                self._record((SYSTEM, name), operation)
            case RegisterCudaMemory(name):
                self._record((CUDA, name), operation)
            case UnregisterMemory(_, _, True) | DropMemory():
                pass  # the region was forgotten when it was unregistered
            case UnregisterMemory(kind, None):
                for key in [key for key in self._operations if key[0] == kind]:
                    del self._operations[key]
            case UnregisterMemory(kind, str(name)):
                self._operations.pop((kind, name), None)
            case _ if (model := model_of(operation)) is not None:
                self._record((MODEL, model), operation)
            case _:
                raise ValueError(f"{operation!r} is not a server-wide operation to replay")

    def operations(self) -> list[Operation]:
        """What a process that starts now replays, in order."""
        return list(self._operations.values())

    def _record(self, key: Key, operation: Operation) -> None:
        """``operation`` is now the last for ``key``: it moves after every other."""
        self._operations.pop(key, None)
        self._operations[key] = operation
