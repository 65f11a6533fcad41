"""The roles of a supervisor's processes, what each is given, and the order each starts in.

A supervisor (``protocol_processes`` > 1) runs two kinds of process, each a whole
server of the lone server's parts (``role_servers.py`` ``RoleServer``):

- :attr:`Role.PROTOCOL`: one of the N protocol processes, which take clients on the
  shared public ports (a :class:`ProtocolProcess`);
- :attr:`Role.MODEL_HOST`: the model host, which runs the models no protocol process
  may copy and serves them on ``host.sock`` (a ``host/process.py``
  ``ModelHostProcess``).

Every process is also told one fact of the whole server, :class:`HostStart`: whether
the model host starts with the protocol processes (a model loaded at start needs it)
or is started later, for a load. A protocol process then waits for the host's socket
at its start; the host loads the repository's models at its start, or only what the
coordinator applied (it catches up).

:func:`start_order` says, in this one place, what each process does at its start
and in which order; ``RoleServer.serve`` runs those steps.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from inferd.serving.backends import BackendChoice

# Awaits the coordinator's switch barrier of that number (a repository reload's).
SwitchBarrier = Callable[[int], Awaitable[None]]


class Role(enum.Enum):
    """What a supervisor's process is."""

    PROTOCOL = "protocol"  # takes clients on the public ports, shared with the others
    MODEL_HOST = "model-host"  # runs the hosted models, for every protocol process


class HostStart(enum.Enum):
    """When the model host starts: a fact of the whole server, told to each process."""

    WITH_SERVER = "with-server"  # with the protocol processes: a model loaded at start needs it
    FOR_A_LOAD = "for-a-load"  # later, by the coordinator, when a load first needs it


class Step(enum.Enum):
    """One thing a process does at its start (:func:`start_order`)."""

    WORKERS = "start the pool's workers"
    PRIVATE = "serve the private sockets"
    PUBLIC = "open the public side (the ports, or host.sock)"
    MODELS = "load the repository's models (load_models_at_startup permitting)"
    CATCH_UP = "catch up on what the others were told"
    READY = "say it is ready"


def start_order(role: Role, host_start: HostStart, restarted: bool) -> tuple[Step, ...]:
    """What a process in ``role`` does at its start, in order.

    At the server's start the public side opens before the models load (a liveness
    probe answers while a long load runs; the protocol processes' loads of hosted
    models wait on ``host.sock`` for the host's); a process restarted after a death
    opens it last, once its models are loaded and it has caught up: the others serve
    meanwhile, and a connection never waits on one still starting. A model host
    started for a load loads no model of its own (what it runs is what the
    coordinator applied: it catches up) and starts its workers with the first load
    that needs them."""
    workers: tuple[Step, ...] = (Step.WORKERS,)
    models: tuple[Step, ...] = (Step.MODELS,)
    if role is Role.MODEL_HOST and host_start is HostStart.FOR_A_LOAD:
        workers, models = (), ()
    if restarted:
        return (*workers, Step.PRIVATE, *models, Step.CATCH_UP, Step.PUBLIC, Step.READY)
    return (*workers, Step.PRIVATE, Step.PUBLIC, *models, Step.CATCH_UP, Step.READY)


@dataclass(frozen=True)
class RoleProcess:
    """What makes a server one of a supervisor's processes, in either role."""

    rest_socket: Path
    metrics_socket: Path
    # Where it takes the coordinator's operations (workers/private_calls.py).
    operations_socket: Path
    # Which backend serves each model: this process's own, or the model host's.
    backends: BackendChoice
    # What it does at its start, in order (start_order).
    start: tuple[Step, ...]
    # Step.CATCH_UP: awaited after its models loaded, before it is ready.
    catch_up: Callable[[], Awaitable[None]] | None = None
    # The models the coordinator placed in the model host when they were loaded after
    # the start (a load marked ``hosted``): the backend choice reads it, the
    # coordinator's operations add to it (OperationsHere) before they load.
    hosted_later: set[str] = field(default_factory=set)
    # A protocol process serves its dataplane here to the model host's model calls
    # (server/worker_calls.py); the host calls at these the models it does not hold.
    calls_socket: Path | None = None
    calls_elsewhere: tuple[Path, ...] = ()


@dataclass(frozen=True)
class ProtocolProcess(RoleProcess):
    """A protocol process's own: its share of the queue bound, the reload barrier."""

    # The queue bound of a model this process runs that sets none: its share of the
    # server's max_queue_size (host/placement.py queue_share); None: the server's.
    queue_bound: int | None = None
    # A repository reload's barrier; None: a reload serves its new instances as soon
    # as they are loaded.
    switch: SwitchBarrier | None = None
