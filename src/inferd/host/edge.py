"""The model host's edge: protocol processes' calls to the models it hosts.

The model host is a whole server with no public ports that serves the models
which cannot run in every protocol process. Each protocol process reaches it over
one unix socket with the worker IPC (``workers/ipc.py``, the commands of
``workers/messages.py``), as it reaches a worker process: its ``Channel`` sends
commands, and this edge, a :class:`~inferd.workers.command_server.CommandServer`
as a worker's loop is, turns them into calls on the host's
:class:`~inferd.serving.dataplane.DataPlane`.

- ``BindHosted`` binds the command's instance id, on that connection, to the model
  version the registry finds ready (waiting for the host's start-up models first)
  and answers its ``LoadedInstance`` with how many workers hold it here;
  ``Unload`` forgets the binding.
- ``Predict`` / ``PredictTraced`` run ``DataPlane.infer`` (a traced one, traced in
  the protocol process, is answered with what the host's dataplane recorded of its
  queue wait, batch and predict, ``messages.HostRun``); a ``Cancel`` of one
  (its client left) is its client's disconnect here: it leaves the queue unrun.
  ``Stream`` (with ``Credit`` and ``Cancel``) runs ``DataPlane.infer_stream``
  (``host/streams.py``).
  Each call is a task of its own, answered when it ends, in whatever order.
- ``ApplyControl`` is answered and ignored: the host gets server-wide settings from
  the coordinator, as every process does. A worker's own commands (``Init``,
  ``LoadInWorker``, ``PredictTimed``) are refused.

Headers: the protocol process put the client's headers in the request's
``parameters["headers"]`` (for a runtime that wants them); they become the host's
request context, so the host's dataplane hands them on as a lone server does, and
the response headers it takes out of the answer go back in it for the protocol
process to take. When a connection closes, every call still running for it is
cancelled (its client is gone) and its bindings are dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import weakref
from collections.abc import Coroutine
from functools import partial
from typing import Any, NamedTuple

from inferd.context import RequestContext
from inferd.errors import InferdError, ModelNotFound
from inferd.host.streams import HostStream, Responses, with_headers
from inferd.observability.trace_record import RequestTrace
from inferd.serving.dataplane import DataPlane
from inferd.serving.registry import Registry
from inferd.serving.runtime_headers import HEADERS
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers import ipc, messages
from inferd.workers.base import Pool
from inferd.workers.command_server import CommandServer
from inferd.workers.framed import FramedProtocol

logger = logging.getLogger(__name__)

# How often a BindHosted that came before the host's start-up models were loaded looks again.
STARTED_POLL_SECONDS = 0.05


class Binding(NamedTuple):
    """What a protocol process's instance id stands for on its connection."""

    name: str
    version: str | None
    wants_headers: bool


async def serve_host(
    dataplane: DataPlane, sock: socket.socket, pool: Pool | None = None
) -> asyncio.Server:
    """Serve the model host's socket (already bound, not listening) for ``dataplane``.
    ``pool``: the one its registry's models run in, in the model host: a version it
    gives up is given up in the protocol processes bound to it too (GIVEN_UP); None
    for the socket of workers' model calls (worker_calls.py), which binds nothing.

    At shutdown the caller closes it and the connections it accepted with
    :func:`close_host` (``Server.close`` alone leaves them open)."""
    connections: set[HostConnection] = set()
    if pool is not None:
        pool.on_instance_failed(partial(_given_up, dataplane.registry, connections))
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(
        lambda: HostConnection(dataplane, connections), sock=sock
    )
    _CONNECTIONS[server] = connections
    return server


def _given_up(
    registry: Registry, connections: set[HostConnection], instance_id: int, reason: str
) -> None:
    """In place of the registry's own handler: it gives the version up, then every
    connection bound to it is told."""
    registry.instance_failed(instance_id, reason)
    for version in registry.versions():
        if version.scheduler is not None and version.scheduler.instance_id == instance_id:
            for connection in list(connections):
                connection.given_up(version.name, version.version, reason)


def close_host(server: asyncio.Server) -> None:
    """Stop accepting, close every connection ``server`` accepted and cancel the
    calls running for them (nothing more is answered on them)."""
    server.close()
    for connection in list(_CONNECTIONS.get(server, ())):
        connection.close()


# Each server's open connections (weak: a server forgotten takes its set along).
_CONNECTIONS: weakref.WeakKeyDictionary[asyncio.Server, set[HostConnection]] = (
    weakref.WeakKeyDictionary()
)


class HostConnection(CommandServer, FramedProtocol[messages.WireCommand]):
    """One protocol process's connection: its bindings and its calls in flight."""

    def __init__(self, dataplane: DataPlane, connections: set[HostConnection]) -> None:
        super().__init__(
            {
                messages.Predict: self._predict,
                messages.PredictTraced: self._predict,
                messages.Credit: self._credit,
                messages.Stream: self._stream,
                messages.Cancel: self._cancel,
                messages.BindHosted: self._bind,
                messages.Unload: self._unbind,
                # Server-wide settings come from the coordinator: answered, ignored.
                messages.ApplyControl: lambda call_id, _, __: self.reply(call_id, None),
            }
        )
        FramedProtocol.__init__(
            self, logger, "Closing a protocol process's connection: a message cannot be read"
        )
        self._dataplane = dataplane
        self._connections = connections
        self._bindings: dict[int, Binding] = {}
        # Each call's task, by call id (held: the loop keeps weak references); a unary
        # call's Cancel cancels it.
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self._streams: dict[int, HostStream] = {}  # open streams, by call id
        self._unsent: list[ipc.Buffer] = []  # replies of this loop turn (_send)
        self.closed = False

    def close(self) -> None:
        """Close the socket and cancel every call running for it, now."""
        if self._transport is not None:
            self._transport.close()
        self.connection_lost(None)

    # FramedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._connections.add(self)

    def received(self, commands: list[messages.WireCommand]) -> None:
        for wire in commands:
            self.handle(wire)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._connections.discard(self)
        self._bindings.clear()
        self._streams.clear()
        for task in list(self._tasks.values()):
            task.cancel()

    # Commands

    def describe(self) -> str:
        return "The model host"

    def _bind(self, call_id: int, instance_id: int, command: messages.BindHosted) -> None:
        self._start(call_id, self._load(call_id, instance_id, command.name, command.version))

    def given_up(self, name: str, version: str | None, reason: str) -> None:
        """Tell the protocol process each of its instance ids bound to that version."""
        for instance_id, binding in list(self._bindings.items()):
            if (binding.name, binding.version) == (name, version):
                self.send(messages.encode_reply(messages.GIVEN_UP, instance_id, reason))

    def _unbind(self, call_id: int, instance_id: int, command: messages.Unload) -> None:
        self._bindings.pop(instance_id, None)
        self.reply(call_id, None)

    def _credit(self, call_id: int, instance_id: int, command: messages.Credit) -> None:
        stream = self._streams.get(call_id)
        if stream is not None:  # else it ended meanwhile
            stream.grant(command.amount)

    def _start(self, call_id: int, call: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._tasks[call_id] = asyncio.get_running_loop().create_task(call)
        task.add_done_callback(lambda _: self._tasks.pop(call_id, None))
        return task

    def _cancel(self, call_id: int, instance_id: int, command: messages.Cancel) -> None:
        """The protocol process's client left: a stream stops; a unary call's task is
        cancelled, as a cancelled gRPC call's is on a lone server (waiting in the queue,
        it leaves it unrun; sent to a worker, the worker is asked to cancel it)."""
        stream = self._streams.get(call_id)
        if stream is not None:  # else it ended: its last reply is on its way
            stream.cancel()
            return
        task = self._tasks.get(call_id)
        if task is not None:  # as a cancelled gRPC call's task on a lone server
            task.cancel()

    async def _load(self, call_id: int, instance_id: int, name: str, version: str | None) -> None:
        dataplane = self._dataplane
        while not dataplane.started:  # a protocol process that started before the host
            await asyncio.sleep(STARTED_POLL_SECONDS)
        try:
            found = dataplane.registry.get_ready(name, version)
        except InferdError as error:  # ModelNotFound, ModelNotReady: they say why
            self.reply_error(call_id, error)
            return
        instance = found.instance
        assert instance is not None  # set when the version became READY
        # Bound to the version found: a newer one loaded later is a new BindHosted.
        self._bindings[instance_id] = Binding(found.name, found.version, instance.wants_headers)
        # With how many workers hold it here (Triton's model configuration says so), and
        # why it is not what is on disk (a failed reload), for the binder's index.
        held = dataplane.registry.instances(found)
        self.reply(call_id, dataclasses.replace(instance, instances=held, reason=found.reason))

    def _predict(
        self,
        call_id: int,
        instance_id: int,
        command: messages.Predict | messages.PredictTraced,
    ) -> None:
        binding = self._bindings.get(instance_id)
        if binding is None:
            self.reply_error(call_id, _not_bound(instance_id))
            return
        timed = type(command) is messages.PredictTraced
        self._start(call_id, self._infer(call_id, binding, command.request, timed))

    async def _infer(
        self, call_id: int, binding: Binding, packed: ipc.PackedRequest, timed: bool
    ) -> None:
        try:
            request = ipc.unpack_request(packed)
            context = RequestContext(headers=_headers(request, binding))
            if timed:  # traced: the host's queue, batch and worker are the request's
                context.trace = RequestTrace(span=None)
            response = await self._dataplane.infer(binding.name, binding.version, request, context)
            answer = _packed(response, context)
        except Exception as error:  # an InferdError, unless something is badly wrong
            self.reply_error(call_id, error)
            return
        if context.trace is not None:
            traced: messages.HostTimed = (answer, messages.host_run(context.trace))
            self.reply(call_id, traced)
        else:
            self.reply(call_id, answer)

    def _stream(self, call_id: int, instance_id: int, command: messages.Stream) -> None:
        packed = command.request
        binding = self._bindings.get(instance_id)
        if binding is None:
            self.reply_error(call_id, _not_bound(instance_id))
            return
        context = RequestContext()
        stream = HostStream(call_id, command.credit, context, self.send, self.reply_error)
        self._streams[call_id] = stream

        def open_responses() -> Responses:
            request = ipc.unpack_request(packed)
            context.headers = _headers(request, binding)
            return self._dataplane.infer_stream(binding.name, binding.version, request, context)

        task = self._start(call_id, stream.run(open_responses))
        task.add_done_callback(lambda _: self._streams.pop(call_id, None))

    # Replies

    def send(self, pieces: list[ipc.Buffer]) -> None:
        """Send at the end of this turn of the loop, with every other reply ready in it:
        a batch's requests all end in one turn, and one write for them all took 8% off
        the host's CPU per request (the mlp scale model, 6 requests a batch, 3 runs)."""
        if self.closed:
            return  # its caller is gone
        if not self._unsent:
            asyncio.get_running_loop().call_soon(self._flush)
        self._unsent.extend(pieces)

    def _flush(self) -> None:
        unsent, self._unsent = self._unsent, []
        if not self.closed and self._transport is not None:
            self._transport.writelines(unsent)


def _headers(request: InferenceRequest, binding: Binding) -> dict[str, str] | None:
    """The client's headers the protocol process passed, out of the request's
    parameters: the host's dataplane puts them back (after its response cache's
    key, as a lone server does)."""
    if not binding.wants_headers:
        return None  # a "headers" parameter is the client's own, left as it is
    headers = request.parameters.pop(HEADERS, None)
    return headers if isinstance(headers, dict) else {}


def _packed(response: InferenceResponse, context: RequestContext) -> ipc.PackedResponse:
    """The response to send, with the runtime's headers back in it (with_headers)."""
    packed = ipc.pack_response(response)
    headers = context.response_headers
    return with_headers(packed, headers) if headers else packed


def _not_bound(instance_id: int) -> ModelNotFound:
    hint = ": the protocol process did not load it on the model host (no BindHosted bound it)"
    return ModelNotFound(f"instance {instance_id}", hint=hint)
