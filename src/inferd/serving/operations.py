"""Server-wide operations as typed messages: one class per operation.

An edge (REST or gRPC) calls a :class:`~inferd.serving.server_wide.ServerWide`
method; where the operation must hold in every protocol process, that method
becomes one of these messages, which travels to the supervisor's coordinator and
from it to every process, where :func:`~inferd.serving.server_wide.apply` turns it
back into the local call. REST paths and JSON bodies stay at the edges: nothing
between the processes parses a path.

On the wire a message is msgpack with its class's tag (``{"op": "Load", ...}``),
decoded straight into its class by msgspec; an answer is the operation's value
(``None``, the log settings, the statistics) or a :class:`Refusal`, the error the
process raised, rebuilt on the other side as the same InferdError class
(``workers/ipc.py``'s form), so both edges answer a forwarded refusal exactly as
the local one.
"""

from __future__ import annotations

from typing import Any

import msgspec

from inferd import errors
from inferd.errors import InferdError, StatusError
from inferd.workers.ipc import error_from_wire, error_to_wire


class Operation(msgspec.Struct, frozen=True, tag_field="op", tag=True, omit_defaults=True):
    """One server-wide operation; its class name is its tag on the wire."""


class Load(Operation, frozen=True, tag=True):
    """A repository load (pinned), with Triton's JSON configuration override."""

    name: str
    config: str | None = None
    # The coordinator placed it in the model host: loaded after the start, one copy
    # serves every protocol process (host/placement.py LOADED_LATER).
    hosted: bool = False


class LoadOnRequest(Operation, frozen=True, tag=True):
    """A request's first use of ``name`` (load_on_request): unpinned, a no-op where it
    is loaded, evicting ``evict`` (the requesting process's choice) if the budget is full."""

    name: str
    evict: str | None = None
    hosted: bool = False  # as Load's


class Unload(Operation, frozen=True, tag=True):
    name: str


class RepositoryReload(Operation, frozen=True, tag=True):
    """The supervisor's poll found ``name``'s folders changed or new: serve what they
    hold now. ``switch``: the coordinator's barrier the new instances wait at before
    they serve (None: serve once loaded)."""

    name: str
    switch: int | None = None
    hosted: bool = False  # as Load's


class RepositoryRemove(Operation, frozen=True, tag=True):
    """The supervisor's poll found no folder of ``name`` any more."""

    name: str


class ChangeLogSettings(Operation, frozen=True, tag=True):
    """Triton's log settings fields to change; answered with the settings in force."""

    changes: dict[str, Any]


class ChangeTraceSettings(Operation, frozen=True, tag=True):
    """Triton's trace settings of ``model`` ("": the server's) to change (checked:
    observability/trace_settings.py, None clears one); ``whole``: they are every field
    set for it (a replay). Answered with the settings in force and the fields set."""

    model: str
    changes: dict[str, Any]
    whole: bool = False


class RegisterSystemMemory(Operation, frozen=True, tag=True):
    name: str
    key: str
    offset: int
    byte_size: int


class RegisterCudaMemory(Operation, frozen=True, tag=True):
    name: str
    raw_handle: bytes
    device_id: int
    byte_size: int


class UnregisterMemory(Operation, frozen=True, tag=True):
    """Region ``name`` of ``kind`` (``triton.shm`` SYSTEM or CUDA), None: every one,
    marked unregistered; answered with the names a request still holds, in any process
    (the coordinator joins them). ``drained``: one process's last holder of the
    region let go; it marks nothing new (a region registered again since stays)."""

    kind: str
    name: str | None = None
    drained: bool = False


class DropMemory(Operation, frozen=True, tag=True):
    """The regions an :class:`UnregisterMemory` marked dropped, but those in ``keep``
    (held in some process): what unregistering does once it knows which are held."""

    kind: str
    name: str | None = None
    keep: list[str] = []


class ReadStatistics(Operation, frozen=True, tag=True):
    """Triton's statistics of every model, of ``name``, or of one version of it."""

    name: str | None = None
    version: str | None = None


AnyOperation = (
    Load
    | LoadOnRequest
    | Unload
    | RepositoryReload
    | RepositoryRemove
    | ChangeLogSettings
    | ChangeTraceSettings
    | RegisterSystemMemory
    | RegisterCudaMemory
    | UnregisterMemory
    | DropMemory
    | ReadStatistics
)
# What loads a model (a protocol process binds to what the host has loaded: the host
# goes first) and what unloads one (the protocol processes stop sending first).
LOADS = (Load, LoadOnRequest, RepositoryReload)
UNLOADS = (Unload, RepositoryRemove)


class Refusal(msgspec.Struct, frozen=True):
    """An operation's refusal: the error's class, its message, its plain fields, and
    the HTTP status a REST edge answers it with (for a class only its module knows)."""

    error: str
    message: str
    status: int
    attributes: dict[str, Any] = {}


_encoder = msgspec.msgpack.Encoder()
_operation_decoder = msgspec.msgpack.Decoder(AnyOperation)
_refusal_decoder = msgspec.msgpack.Decoder(Refusal)


def encode(message: Any) -> bytes:
    """A message, an answer's value or a :class:`Refusal`, as msgpack."""
    return _encoder.encode(message)


def decode_operation(data: bytes) -> AnyOperation:
    """The operation ``data`` encodes; msgspec.ValidationError or DecodeError if none."""
    return _operation_decoder.decode(data)


def decode_value(data: bytes) -> Any:
    """An operation's value as its process answered it."""
    return msgspec.msgpack.decode(data) if data else None


def refusal_of(error: BaseException, status: int) -> Refusal:
    """``error`` as a refusal; ``status``: what the REST edge answers it with."""
    name, message, attributes = error_to_wire(error)
    return Refusal(name, message, status, attributes)


def decode_refusal(data: bytes) -> Refusal:
    """The :class:`Refusal` ``data`` encodes; msgspec.ValidationError or DecodeError if none."""
    return _refusal_decoder.decode(data)


def error_of(refusal: bytes) -> InferdError:
    """The error an encoded :class:`Refusal` stands for: the same class where it is one
    of ``inferd.errors``, else a StatusError of the same status (and Retry-After)."""
    found = decode_refusal(refusal)
    known = getattr(errors, found.error, None)
    if isinstance(known, type) and issubclass(known, InferdError):
        rebuilt = error_from_wire((found.error, found.message, dict(found.attributes)))
        assert isinstance(rebuilt, InferdError)
        return rebuilt
    error = StatusError(found.message, found.status)
    retry_after = found.attributes.get("retry_after")
    error.retry_after = retry_after if isinstance(retry_after, int | float) else None
    return error


def model_of(operation: Operation) -> str | None:
    """The model an operation loads or unloads; None for any other."""
    if isinstance(operation, LOADS + UNLOADS):
        return operation.name
    return None
