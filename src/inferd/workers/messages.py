"""The commands and replies of the worker and model host channels, one class each.

A :class:`Command` goes from a protocol process (or a pool's main process) to a
worker process or to the model host; a reply comes back. Both ends share the
framing of :mod:`inferd.workers.ipc`. The two servers accept different sets
(``WORKER_COMMANDS``, ``HOST_COMMANDS``): where a worker and the host mean
different things, the commands are different classes (:class:`LoadInWorker`
loads a model there, :class:`BindHosted` binds an instance id to a model the
host already serves), so a command sent to the wrong one is refused by name
rather than misread.

On the wire a command is a plain tuple ``(KIND, call_id, instance_id, *fields)``
and a reply ``(kind, call_id, body)``, not a pickled instance: each instance
pickles as a class reference, looked up again on decode, plus a Python-level
constructor call (measured with a one-row FP32 request: encode + decode of a
command and its reply 2.2x slower, a worker round trip 1.4x slower). The
receiving command server rebuilds the command from its fields (:func:`decode`).
The classes are slotted dataclasses, not frozen ones: a frozen one's constructor
sets each field through ``object.__setattr__`` (measured, building and rebuilding
a Predict: ~0.4 us slotted, ~0.6 us frozen). Nothing changes a command once built.
Replies are read straight from their tuple by the channel, whose loop is the hot
path of every call, so they are kinds rather than classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from inferd.workers import ipc

if TYPE_CHECKING:
    from inferd.observability.trace_record import RequestTrace
    from inferd.settings import ModelSettings, ServerSettings
    from inferd.workers.base import Control


class Command:
    """One command; ``KIND`` is its tag on the wire, its fields follow in order."""

    __slots__ = ()
    KIND: ClassVar[int]

    def fields(self) -> tuple[Any, ...]:
        raise NotImplementedError


@dataclass(slots=True)
class Init(Command):
    """Worker only, first: answered with the worker's pid."""

    KIND: ClassVar[int] = 1
    index: int
    sys_path: list[str]  # the main process's import path; empty: keep the worker's own
    settings: ServerSettings
    # The control messages every process gets, kept since they were sent: applied after
    # the settings, they override them (e.g. a log level set at run time).
    kept: list[Control]

    def fields(self) -> tuple[Any, ...]:
        return self.index, self.sys_path, self.settings, self.kept


@dataclass(slots=True)
class LoadInWorker(Command):
    """Worker only: load the model as this instance id on ``device``; answered with
    its ``base.LoadedInstance``."""

    KIND: ClassVar[int] = 2
    settings: ModelSettings
    device: str | None

    def fields(self) -> tuple[Any, ...]:
        return self.settings, self.device


@dataclass(slots=True)
class BindHosted(Command):
    """Host only: bind this instance id, on this connection, to the version of a model
    the host serves (ready; ``version`` None: its default); answered with its
    ``base.LoadedInstance`` and how many of the host's workers hold it."""

    KIND: ClassVar[int] = 15
    name: str
    version: str | None

    def fields(self) -> tuple[Any, ...]:
        return self.name, self.version


@dataclass(slots=True)
class Unload(Command):
    """Release the instance id (a worker unloads the model; the host forgets the
    binding); answered with None."""

    KIND: ClassVar[int] = 3

    def fields(self) -> tuple[Any, ...]:
        return ()


@dataclass(slots=True)
class Predict(Command):
    """Run a request; answered with an ``ipc.PackedResponse``."""

    KIND: ClassVar[int] = 4
    request: ipc.PackedRequest

    def fields(self) -> tuple[Any, ...]:
        return (self.request,)


@dataclass(slots=True)
class PredictTimed(Command):
    """Worker only, a traced request: answered with a :data:`WorkerTimed`."""

    KIND: ClassVar[int] = 8
    request: ipc.PackedRequest

    def fields(self) -> tuple[Any, ...]:
        return (self.request,)


@dataclass(slots=True)
class PredictTraced(Command):
    """Host only, a request traced in the protocol process: answered with a
    :data:`HostTimed`, what the host's dataplane recorded of it."""

    KIND: ClassVar[int] = 16
    request: ipc.PackedRequest

    def fields(self) -> tuple[Any, ...]:
        return (self.request,)


@dataclass(slots=True)
class Stream(Command):
    """Run ``predict_stream``; answered with STREAMED replies, then ENDED (or ERROR).
    ``credit``: how many responses it may send before a :class:`Credit` (see
    remote_stream.py)."""

    KIND: ClassVar[int] = 5
    request: ipc.PackedRequest
    credit: int

    def fields(self) -> tuple[Any, ...]:
        return self.request, self.credit


@dataclass(slots=True)
class Credit(Command):
    """The stream of this call id may send ``amount`` more responses; unanswered."""

    KIND: ClassVar[int] = 6
    amount: int

    def fields(self) -> tuple[Any, ...]:
        return (self.amount,)


@dataclass(slots=True)
class Cancel(Command):
    """The caller of this call id left. A stream stops its generator and answers
    ENDED (unless it ended); the host takes a unary call out of its queue,
    unanswered. A worker cancels a unary call's async predict (a synchronous one
    runs to its end) and answers it with an error nobody reads: its slot frees then."""

    KIND: ClassVar[int] = 7

    def fields(self) -> tuple[Any, ...]:
        return ()


@dataclass(slots=True)
class ApplyControl(Command):
    """A ``base.Control`` message (a feature's own class): the worker applies it; the
    host answers it and ignores it (server-wide settings reach it from the
    coordinator). Answered with None. Features add Control classes, not commands."""

    KIND: ClassVar[int] = 9
    message: Control

    def fields(self) -> tuple[Any, ...]:
        return (self.message,)


COMMANDS: dict[int, type[Command]] = {
    cls.KIND: cls
    for cls in (
        Init,
        LoadInWorker,
        BindHosted,
        Unload,
        Predict,
        PredictTimed,
        PredictTraced,
        Stream,
        Credit,
        Cancel,
        ApplyControl,
    )
}
_SHARED = (Unload, Predict, Stream, Credit, Cancel, ApplyControl)
WORKER_COMMANDS: tuple[type[Command], ...] = (Init, LoadInWorker, PredictTimed, *_SHARED)
HOST_COMMANDS: tuple[type[Command], ...] = (BindHosted, PredictTraced, *_SHARED)

# Reply kinds: (kind, call_id, body).
RESULT = 10  # what the command returned
ERROR = 11  # an ipc.WireError: what the command raised (for a stream: its end)
STREAMED = 13  # a list of PackedResponses: the next responses of a stream, in order
ENDED = 14  # None: the stream's generator has stopped (exhausted, or cancelled)
# With the call id of the last Predict, PredictTimed or Stream a worker read, sent
# before it runs them (the host sends none): what the caller's channel counts as
# started when the worker dies. A request the worker never read is not the suspect
# of its death (retry.py) and is sent to another worker.
READ = 15
WORK_KINDS = frozenset((Predict.KIND, PredictTimed.KIND, Stream.KIND))
# From the model host, unasked, with a bound instance id as the call id and the reason
# as the body: the host gave up that version (its load keeps crashing its worker), so
# the protocol process's index and answers say so too.
GIVEN_UP = 16
# In front of a reply, with call id -1: a custom_metrics.Shipment, the custom
# metrics a runtime registered and logged since the worker's last reply.
METRICS = 12

Reply = tuple[int, int, Any]
"""(kind, call_id, body): worker or host -> caller."""
WireCommand = tuple[Any, ...]
"""(KIND, call_id, instance_id, *fields): caller -> worker or host."""

WorkerTimed = tuple[ipc.PackedResponse, int, int]
"""PredictTimed's answer: the response, when predict started and ended
(``time.time_ns()`` in the worker)."""
HostRun = tuple[int, int, int | None, int, int, int]
"""What the host's dataplane recorded of a traced call: its batch's rows and
requests, the host's worker that ran it (None: the host's own process), when
predict started and ended (epoch ns), and how long it queued there (ns)."""
HostTimed = tuple[ipc.PackedResponse, HostRun | None]
"""PredictTraced's answer: the response, and its HostRun (None: the host answered
from its response cache)."""


def encode_command(call_id: int, instance_id: int, command: Command) -> list[ipc.Buffer]:
    return ipc.encode((command.KIND, call_id, instance_id, *command.fields()))


def encode_reply(kind: int, call_id: int, body: Any) -> list[ipc.Buffer]:
    reply: Reply = (kind, call_id, body)
    return ipc.encode(reply)


def decode(wire: WireCommand) -> tuple[int, int, Command]:
    """(call_id, instance_id, command) out of a received tuple; raises ValueError for
    an unknown kind or fields that do not fit it (answered to the call id, if any)."""
    if type(wire) is not tuple or len(wire) < 3:
        raise ValueError(f"a message that is not a command: {type(wire).__name__}")
    cls = COMMANDS.get(wire[0])
    if cls is None:
        raise ValueError(f"unknown command {wire[0]}")
    try:
        return wire[1], wire[2], cls(*wire[3:])
    except TypeError as error:
        raise ValueError(f"bad command {cls.__name__}: {error}") from error


def host_run(trace: RequestTrace) -> HostRun | None:
    """The host's side of a PredictTraced: what its dataplane recorded in ``trace``."""
    batch = trace.batch
    if not trace.ended_ns or batch is None:
        return None
    waited = trace.dispatched_ns - trace.queued_ns
    started, ended = batch.predict_started_ns, batch.predict_ended_ns
    return batch.rows, batch.requests, batch.worker, started, ended, waited
