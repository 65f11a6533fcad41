"""The gRPC edge: every call of the V2 service goes through one :class:`GrpcEdge`.

The servicer (server/grpc/servicer.py) and Ray Serve's gRPC entry (inferd/ray.py,
which calls the servicer without a gRPC server around it) both reach the core
here, so each call gets the same treatment wherever it came from:

- access: the method's API group's guard (``restricted_apis``,
  ``model_repository_api``) reads the call's metadata before anything runs;
- a span per call when tracing is on (not current for a stream: its generator may
  be resumed in another context), its model work under it, its status code on it;
- the per-method counters (metrics), and core errors as status codes through
  :func:`~inferd.server.errors.grpc_error`;
- for inference: the request's context (its metadata as headers, its trace),
  shared-memory inputs read and outputs written (``shared_memory_enabled``), the
  answer's size checked against ``grpc_max_message_length``, and the headers a
  runtime set trailed back (for a stream: on the call, once it ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from inferd.context import RequestContext
from inferd.errors import InferdError, InvalidRequest, PayloadTooLarge, PermissionDenied
from inferd.observability.stats import GrpcMethodStats, GrpcStats
from inferd.protocol import pb
from inferd.server.access import ApiGuard, api_guards
from inferd.server.errors import grpc_error
from inferd.server.grpc.access import RestrictedMethods
from inferd.server.grpc.codec import decode_infer_request, encode_infer_response, wants_raw_output
from inferd.server.grpc.health import ShutdownSignal
from inferd.server.grpc.registration import SERVICE, MalformedMessage
from inferd.server.grpc.stream import StreamRequest, answer_stream
from inferd.server.output_form import OutputForm
from inferd.serving.dataplane import DataPlane
from inferd.serving.server_wide import LocalServerWide, ServerWide
from inferd.triton.shm import RegionClaim, write_requested_outputs
from inferd.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferd.observability.tracing import ServerSpan, Tracing

# grpc_max_message_length -1 (as ModelMesh sets it): no limit, gRPC's own meaning of -1.
UNLIMITED = -1
# Bytes a ModelStreamInferResponse adds around the ModelInferResponse it carries,
# with room for the final-response flag (server/grpc/stream.py) added after the check.
STREAM_WRAPPING = 64
# Codes that are the server's failure (OpenTelemetry's RPC conventions); the others
# (a bad request, a missing model) are the caller's.
SERVER_FAILURES = frozenset(
    (
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    )
)
_METHOD_PREFIX = f"/{SERVICE.full_name}/"

Request = TypeVar("Request")
Response = TypeVar("Response")


class MetadataHeaders(Mapping[str, str]):
    """A call's invocation metadata as request headers (``-bin`` entries left out),
    read only if a runtime asks for them (serving/runtime_headers.py)."""

    __slots__ = ("_call", "_read")

    def __init__(self, call: Any) -> None:
        self._call = call
        self._read: dict[str, str] | None = None

    def _headers(self) -> dict[str, str]:
        if self._read is None:
            metadata = self._call.invocation_metadata() or ()
            self._read = {key: value for key, value in metadata if isinstance(value, str)}
        return self._read

    def __getitem__(self, key: str) -> str:
        return self._headers()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._headers())

    def __len__(self) -> int:
        return len(self._headers())


class GrpcEdge:
    """Turns each gRPC call into a core call and the core's answer back into messages."""

    def __init__(
        self,
        dataplane: DataPlane,
        max_message_length: int,
        guards: dict[str, ApiGuard] | None = None,
        tracing: Tracing | None = None,
        grpc_stats: GrpcStats | None = None,
        server_wide: ServerWide | None = None,
    ) -> None:
        """``guards``: the API groups' guards (default: as the dataplane's settings
        say, server/access.py): an entry without a gRPC server (Ray's) is checked too.
        ``server_wide``: where server-wide operations go (default: applied to
        ``dataplane`` alone, serving/server_wide.py)."""
        self.dataplane = dataplane
        self.server_wide = server_wide if server_wide is not None else LocalServerWide(dataplane)
        self.tracing = tracing
        if guards is None:
            guards = api_guards(dataplane.settings)
        self.guards = guards  # by API group: the access interceptor's too (health, reflection)
        # Each method of the V2 service's guard, by its short name (none: open).
        table = RestrictedMethods(guards).guards
        self._guards = {
            method.name: table[_METHOD_PREFIX + method.name]
            for method in SERVICE.methods
            if _METHOD_PREFIX + method.name in table
        }
        # Answers beyond it are refused here, with a message: grpcio would fail the
        # call (and end a whole stream) with a traceback in the log. None: no limit.
        self.max_answer_size = (
            None if max_message_length == UNLIMITED else max_message_length - STREAM_WRAPPING
        )
        # Each method's counters, bound once (none when metrics are off).
        self._stats = _method_stats(grpc_stats) if grpc_stats is not None else {}

    # Calls

    async def unary(
        self,
        method: str,
        answer: Callable[[Request, Any], Awaitable[Response]],
        request: Request,
        call: Any,
    ) -> Response:
        """Answer one unary call with ``answer`` (a servicer method), or its error as a
        status code: never a traceback to the client."""
        stats = self._stats.get(method)
        started = time.perf_counter() if stats is not None else 0.0
        if stats is not None:
            stats.started += 1
        tracing = self.tracing
        opened = None
        if tracing is not None:  # a ModelInfer is traced as its model's trace settings say
            model = request.model_name if isinstance(request, pb.ModelInferRequest) else None
            opened = tracing.grpc_span(method, _metadata(call), model=model)
        code = grpc.StatusCode.OK
        try:
            self._check_access(method, call)
            if isinstance(request, MalformedMessage):
                raise request.error()
            return await answer(request, call)
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as error:
            code, message, metadata = grpc_error(error, f"gRPC {method}")
            await call.abort(code, message, trailing_metadata=metadata)
        finally:
            if stats is not None:
                stats.finished(code.name, time.perf_counter() - started)
            if opened is not None:
                self._end_span(opened, code)
        raise AssertionError("abort always raises")

    async def stream(
        self, requests: AsyncIterator[StreamRequest], call: Any, shutdown: ShutdownSignal
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Answer a ``ModelStreamInfer`` call: each request as the models answer it."""
        method = "ModelStreamInfer"
        stats = self._stats.get(method)
        started = time.perf_counter()
        if stats is not None:
            stats.started += 1
        tracing = self.tracing
        opened = (
            tracing.grpc_span(method, _metadata(call), current=False)
            if tracing is not None
            else None
        )
        code = grpc.StatusCode.CANCELLED  # unless it ends in one of the ways below
        stream = _OpenStream(self, call, opened)
        try:
            try:
                self._check_access(method, call)
            except PermissionDenied as error:
                code, message, _ = grpc_error(error, "")
                await call.abort(code, message)
            answers = answer_stream(requests, call, stream.run, stream.streams, shutdown)
            async with contextlib.aclosing(answers) as out:
                async for made in out:
                    for answer in made:
                        yield answer
            code = grpc.StatusCode.OK
        except grpc.aio.AbortError:
            if code is grpc.StatusCode.CANCELLED:
                code = grpc.StatusCode.UNAVAILABLE  # its other abort: the server shuts down
            raise
        except Exception:
            code = grpc.StatusCode.UNKNOWN
            raise
        finally:
            stream.trail()
            if stats is not None:
                stats.finished(code.name, time.perf_counter() - started)
            if opened is not None:
                self._end_span(opened, code)

    # Inference

    async def infer(self, message: pb.ModelInferRequest, call: Any) -> pb.ModelInferResponse:
        """One ``ModelInfer`` (its access checked by :meth:`unary` already)."""
        claim = self._claim()
        try:
            request, form = self._decoded(message, claim)
            name, version = message.model_name, message.model_version or None
            context = self._context(name, version, call)
            response = await self.dataplane.infer(name, version, request, context)
            self._traced(context, response)
            if context.response_headers:  # a runtime set some: MLServer trails them
                call.set_trailing_metadata(_trailing(context.response_headers))
            return self._encoded(message, request, form, response, claim)
        finally:
            if claim is not None:
                claim.release()

    async def infer_in_stream(
        self, message: pb.ModelInferRequest, call: Any, span: ServerSpan | None
    ) -> AsyncGenerator[tuple[list[pb.ModelStreamInferResponse], RequestContext], None]:
        """One request of a stream: its answers as soon as the model yields them, in
        lists of those ready together, each with the request's context."""
        claim = self._claim()
        try:
            request, form = self._decoded(message, claim)
            name, version = message.model_name, message.model_version or None
            context = self._context(name, version, call, span)
            responses = self.dataplane.infer_stream(name, version, request, context)
            last = None
            async with contextlib.aclosing(responses):
                async for ready in responses:
                    answers = []
                    for response in ready:
                        answer = pb.ModelStreamInferResponse()
                        into = answer.infer_response
                        self._encoded(message, request, form, response, claim, into)
                        answers.append(answer)
                        last = response
                    yield answers, context
            if last is not None:
                self._traced(context, last)
        finally:
            if claim is not None:
                claim.release()

    def _context(
        self, name: str, version: str | None, call: Any, span: ServerSpan | None = None
    ) -> RequestContext:
        """A request's context: the call's metadata as headers, its trace under the
        call's span (``span``: a stream's, which is never current)."""
        tracing = self.tracing
        trace = tracing.inference(name, version, span) if tracing is not None else None
        return RequestContext(headers=MetadataHeaders(call), trace=trace)

    def _traced(self, context: RequestContext, response: InferenceResponse) -> None:
        """Add a request's model work under its span (a stream's: once, at its end)."""
        if context.trace is not None and self.tracing is not None:
            self.tracing.answered(context.trace, response)

    def streams(self, message: pb.ModelInferRequest) -> bool:
        """Whether the request goes to a ready model that streams (the stream sends
        its responses as they come; other models' answers keep their request's place)."""
        try:
            return self.dataplane.model_streams(message.model_name, message.model_version or None)
        except InferdError:
            return False  # its error is answered in order

    def _claim(self) -> RegionClaim | None:
        """A request's claim on the shared memory regions, which holds those it uses
        until it is released (None: the extension is off)."""
        regions = self.dataplane.shared_memory
        return regions.claim() if regions is not None else None

    def _decoded(
        self, message: pb.ModelInferRequest, claim: RegionClaim | None
    ) -> tuple[InferenceRequest, OutputForm]:
        if not message.model_name:
            raise InvalidRequest("model_name is required")
        return decode_infer_request(message, claim)

    def _encoded(
        self,
        message: pb.ModelInferRequest,
        request: InferenceRequest,
        form: OutputForm,
        response: InferenceResponse,
        claim: RegionClaim | None,
        into: pb.ModelInferResponse | None = None,
    ) -> pb.ModelInferResponse:
        """The answer: outputs asked for as classes classified, those the client asked
        for in its shared memory written there (the only place gRPC writes them), the
        rest encoded, the size checked."""
        if form.classes:
            response = self.dataplane.classified(response, form.classes)
        shared = write_requested_outputs(claim, request, response)
        raw = wants_raw_output(request)
        answer = encode_infer_response(response, raw, into, shared)
        if self.max_answer_size is None:
            return answer
        size = answer.ByteSize()
        if size > self.max_answer_size:
            raise PayloadTooLarge(
                f"The answer of model {message.model_name!r} is {size} bytes, "
                f"over grpc_max_message_length ({self.max_answer_size + STREAM_WRAPPING}); "
                + (
                    "ask for fewer outputs or raise grpc_max_message_length"
                    if raw
                    else "leave out the raw_output parameter: raw outputs are smaller"
                )
            )
        return answer

    # Access and spans

    def _check_access(self, method: str, call: Any) -> None:
        guard = self._guards.get(method)
        if guard is not None:
            guard.check_metadata(call.invocation_metadata())

    def _end_span(self, opened: ServerSpan, code: grpc.StatusCode) -> None:
        assert self.tracing is not None
        failure = code.name if code in SERVER_FAILURES else None
        self.tracing.end_grpc(opened, code.value[0], failure)


class _OpenStream:
    """One ``ModelStreamInfer`` call's requests, run through the edge; the headers
    its runtimes set, trailed on the call when it ends."""

    def __init__(self, edge: GrpcEdge, call: Any, span: ServerSpan | None) -> None:
        self._edge = edge
        self._call = call
        self._span = span
        self._response_headers: dict[str, str] = {}
        self.streams = edge.streams

    async def run(
        self, message: pb.ModelInferRequest
    ) -> AsyncGenerator[list[pb.ModelStreamInferResponse], None]:
        answers = self._edge.infer_in_stream(message, self._call, self._span)
        async with contextlib.aclosing(answers):
            async for made, context in answers:
                if context.response_headers:
                    self._response_headers.update(context.response_headers)
                yield made

    def trail(self) -> None:
        """Send the headers runtimes set, as MLServer trails a unary call's."""
        if self._response_headers:
            self._call.set_trailing_metadata(_trailing(self._response_headers))


def _metadata(call: Any) -> Any:
    return call.invocation_metadata() or ()


def _trailing(headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((key.lower(), value) for key, value in headers.items())


def _method_stats(grpc_stats: GrpcStats) -> dict[str, GrpcMethodStats]:
    """Counters for every method of the inference service, labelled as py-grpc-prometheus."""
    bound = {}
    for method in SERVICE.methods:
        kind = {
            (False, False): "unary",
            (False, True): "server_stream",
            (True, False): "client_stream",
            (True, True): "bidi_stream",
        }[(method.client_streaming, method.server_streaming)]
        bound[method.name] = grpc_stats.method(SERVICE.full_name, method.name, kind)
    return bound
