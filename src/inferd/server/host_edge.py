"""The model host's edge: protocol processes' calls to the models it hosts.

The model host is a whole server with no public ports that serves the models
which cannot run in every protocol process. Each protocol process reaches it over
one unix socket with the worker IPC (``workers/ipc.py``), as it reaches a worker
process: its ``Channel`` sends commands, already decoded, and this edge turns them
into calls on the host's :class:`~inferd.serving.dataplane.DataPlane`.

- ``LOAD`` ``(name, version)`` binds the command's instance id, on that connection,
  to the model version the registry finds ready (waiting for the host's start-up
  models first) and answers its ``LoadedInstance`` with how many workers hold it
  here; ``UNLOAD`` forgets the binding.
- ``PREDICT`` / ``PREDICT_TIMED`` run ``DataPlane.infer`` (a timed one, traced in
  the protocol process, is answered with what the host's dataplane recorded of its
  queue wait, batch and predict, ``hosted.HostRun``); a ``CANCEL`` of one
  (its client left) is its client's disconnect here: it leaves the queue unrun.
  ``STREAM`` (with ``CREDIT`` and ``CANCEL``) runs ``DataPlane.infer_stream``
  (``host_streams.py``).
  Each call is a task of its own, answered when it ends, in whatever order.
- ``CONTROL`` is answered and ignored: the host gets server-wide settings from the
  coordinator, as every process does.

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
from typing import Any, NamedTuple, cast

from inferd.context import RequestContext
from inferd.errors import InferdError, ModelError, ModelNotFound
from inferd.observability.trace_record import RequestTrace
from inferd.server.host_streams import HostStream, Responses, with_headers
from inferd.serving.dataplane import DataPlane
from inferd.serving.runtime_headers import HEADERS
from inferd.types import InferenceRequest, InferenceResponse
from inferd.workers import ipc
from inferd.workers.hosted import host_run

logger = logging.getLogger(__name__)

# How often a LOAD that came before the host's start-up models were loaded looks again.
STARTED_POLL_SECONDS = 0.05


class Binding(NamedTuple):
    """What a protocol process's instance id stands for on its connection."""

    name: str
    version: str | None
    wants_headers: bool


async def serve_host(dataplane: DataPlane, sock: socket.socket) -> asyncio.Server:
    """Serve the model host's socket (already bound, not listening) for ``dataplane``.

    At shutdown the caller closes it and the connections it accepted with
    :func:`close_host` (``Server.close`` alone leaves them open)."""
    connections: set[HostConnection] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(
        lambda: HostConnection(dataplane, connections), sock=sock
    )
    _CONNECTIONS[server] = connections
    return server


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


class HostConnection(asyncio.BufferedProtocol):
    """One protocol process's connection: its bindings and its calls in flight."""

    def __init__(self, dataplane: DataPlane, connections: set[HostConnection]) -> None:
        self._dataplane = dataplane
        self._connections = connections
        self._decoder: ipc.FrameDecoder[ipc.Command] = ipc.FrameDecoder()
        self._transport: asyncio.Transport | None = None
        self._bindings: dict[int, Binding] = {}
        # Each call's task, by call id (held: the loop keeps weak references); a unary
        # call's CANCEL cancels it.
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self._streams: dict[int, HostStream] = {}  # open streams, by call id
        self._unsent: list[ipc.Buffer] = []  # replies of this loop turn (_send)
        self.closed = False

    def close(self) -> None:
        """Close the socket and cancel every call running for it, now."""
        if self._transport is not None:
            self._transport.close()
        self.connection_lost(None)

    # asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence no isinstance.
        self._transport = cast(asyncio.Transport, transport)
        self._connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            commands = self._decoder.buffer_updated(nbytes)
        except ipc.ProtocolError:
            logger.exception("Closing a protocol process's connection: a message cannot be read")
            self.close()
            return
        for kind, call_id, instance_id, body in commands:
            try:
                self._handle(kind, call_id, instance_id, body)
            except Exception as error:  # a malformed body: answer it, read on
                self._reply_error(call_id, ModelError(f"Bad command {kind}: {error!r}"))

    def eof_received(self) -> bool:
        return False  # close our end too; connection_lost follows

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

    def _handle(self, kind: int, call_id: int, instance_id: int, body: Any) -> None:
        if kind == ipc.PREDICT or kind == ipc.PREDICT_TIMED:
            binding = self._bindings.get(instance_id)
            if binding is None:
                self._reply_error(call_id, _not_bound(instance_id))
            else:
                timed = kind == ipc.PREDICT_TIMED
                self._start(call_id, self._predict(call_id, binding, body, timed))
        elif kind == ipc.CREDIT:
            stream = self._streams.get(call_id)
            if stream is not None:  # else it ended meanwhile
                stream.grant(body)
        elif kind == ipc.STREAM:
            self._stream(call_id, instance_id, body)
        elif kind == ipc.CANCEL:
            self._cancel(call_id)
        elif kind == ipc.LOAD:
            name, version = body
            self._start(call_id, self._load(call_id, instance_id, name, version))
        elif kind == ipc.UNLOAD:
            self._bindings.pop(instance_id, None)
            self._reply(call_id, None)
        elif kind == ipc.CONTROL:
            self._reply(call_id, None)  # server-wide settings come from the coordinator
        else:
            self._reply_error(call_id, ModelError(f"The model host got unknown command {kind}"))

    def _start(self, call_id: int, call: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._tasks[call_id] = asyncio.get_running_loop().create_task(call)
        task.add_done_callback(lambda _: self._tasks.pop(call_id, None))
        return task

    def _cancel(self, call_id: int) -> None:
        """The protocol process's client left: a stream stops; a unary call's task is
        cancelled, as a cancelled gRPC call's is on a lone server (waiting in the queue,
        it leaves it unrun; sent to a worker, it runs there to its end, unanswered)."""
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
            self._reply_error(call_id, error)
            return
        instance = found.instance
        assert instance is not None  # set when the version became READY
        # Bound to the version found: a newer one loaded later is a new LOAD.
        self._bindings[instance_id] = Binding(found.name, found.version, instance.wants_headers)
        # With how many workers hold it here (Triton's model configuration says so).
        held = dataplane.registry.instances(found)
        self._reply(call_id, dataclasses.replace(instance, instances=held))

    async def _predict(
        self,
        call_id: int,
        binding: Binding,
        packed: ipc.PackedRequest,
        timed: bool,
    ) -> None:
        try:
            request = ipc.unpack_request(packed)
            context = RequestContext(headers=_headers(request, binding))
            if timed:  # traced: the host's queue, batch and worker are the request's
                context.trace = RequestTrace(span=None)
            response = await self._dataplane.infer(binding.name, binding.version, request, context)
            answer = _packed(response, context)
        except Exception as error:  # an InferdError, unless something is badly wrong
            self._reply_error(call_id, error)
            return
        if context.trace is not None:
            self._reply(call_id, (answer, host_run(context.trace)))
        else:
            self._reply(call_id, answer)

    def _stream(self, call_id: int, instance_id: int, body: ipc.StreamBody) -> None:
        packed, credit = body
        binding = self._bindings.get(instance_id)
        if binding is None:
            self._reply_error(call_id, _not_bound(instance_id))
            return
        context = RequestContext()
        stream = HostStream(call_id, credit, context, self._send)
        self._streams[call_id] = stream

        def open_responses() -> Responses:
            request = ipc.unpack_request(packed)
            context.headers = _headers(request, binding)
            return self._dataplane.infer_stream(binding.name, binding.version, request, context)

        task = self._start(call_id, stream.run(open_responses))
        task.add_done_callback(lambda _: self._streams.pop(call_id, None))

    # Replies

    def _reply(self, call_id: int, result: Any) -> None:
        try:
            pieces = ipc.encode_reply(ipc.RESULT, call_id, result)
        except Exception as error:
            message = f"The model host cannot send the result back: {error}"
            self._reply_error(call_id, ModelError(message))
            return
        self._send(pieces)

    def _reply_error(self, call_id: int, error: BaseException) -> None:
        if not isinstance(error, InferdError):
            logger.error("A hosted call failed: %s", error, exc_info=error)
        self._send(ipc.encode_reply(ipc.ERROR, call_id, ipc.error_to_wire(error)))

    def _send(self, pieces: list[ipc.Buffer]) -> None:
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
    hint = ": the protocol process did not load it on the model host (no LOAD bound it)"
    return ModelNotFound(f"instance {instance_id}", hint=hint)
