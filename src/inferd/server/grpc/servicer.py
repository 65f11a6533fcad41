"""The Open Inference Protocol over gRPC (``inference.GRPCInferenceService``).

Served by ``grpc.aio`` on ``grpc_port``, in the same event loop as the REST
server and from the same DataPlane, so a model answers the same on both.
Message conversion lives in :mod:`inferd.server.grpc.codec`.

- Outputs come back in ``raw_output_contents`` (what tritonclient reads). A
  request with the parameter ``raw_output`` = false (``bool_param``) gets every
  output in its typed ``contents`` field instead; FP16 and BF16 travel only raw.
- Core errors become gRPC status codes through :func:`~inferd.server.errors.grpc_error`.
- ``ModelStreamInfer`` (see :mod:`inferd.server.grpc.stream`) is Triton's decoupled
  mode: several requests of one stream run at once, each response is sent as soon
  as the model yields it; a failed request is answered with ``error_message`` and
  the stream goes on.
- ``grpc.health.v1.Health`` (see :mod:`inferd.server.grpc.health`).
- Server reflection lists and describes all three services (grpcurl works).
- Shutdown (shutdown.py): new calls are refused, calls in flight finish within
  ``shutdown_grace_seconds``; open streams answer what they already read, then end
  with UNAVAILABLE. What still runs near the deadline fails with UNAVAILABLE (a
  stream's open requests with an ``error_message`` each).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf import json_format

from inferd.context import RequestContext
from inferd.errors import InferdError, InvalidRequest, PayloadTooLarge
from inferd.observability.stats import GrpcMethodStats, GrpcStats
from inferd.protocol import pb, pb_grpc
from inferd.server import shm_api
from inferd.server.codec_triton import (
    decode_grpc_log_settings,
    encode_grpc_log_settings,
    encode_model_config,
    load_config,
)
from inferd.server.errors import grpc_error
from inferd.server.grpc.codec import (
    decode_infer_request,
    encode_infer_response,
    encode_model_metadata,
    encode_repository_index,
    encode_server_metadata,
    wants_raw_output,
)
from inferd.server.grpc.health import ShutdownSignal
from inferd.server.grpc.registration import SERVICE, MalformedMessage
from inferd.server.grpc.stream import StreamRequest, answer_stream
from inferd.serving.dataplane import DataPlane
from inferd.triton.shm import SharedMemoryRegistry, write_outputs
from inferd.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferd.observability.tracing import Tracing

logger = logging.getLogger(__name__)

# grpc_max_message_length -1 (as ModelMesh sets it): no limit, gRPC's own meaning of -1.
UNLIMITED = -1

# Bytes a ModelStreamInferResponse adds around the ModelInferResponse it carries,
# with room for the final-response flag (server/grpc/stream.py) added after the check.
_STREAM_WRAPPING = 64

Request = TypeVar("Request")
Response = TypeVar("Response")
Handler = Callable[[Any, Request, grpc.aio.ServicerContext], Awaitable[Response]]


def _handles_errors(method: Handler[Request, Response]) -> Handler[Request, Response]:
    """Turn core errors into gRPC status codes; never leak a traceback to the client.

    With metrics on, also count the call and its status code."""
    name = method.__name__

    async def wrapper(self: Any, request: Request, context: grpc.aio.ServicerContext) -> Response:
        stats: GrpcMethodStats | None = self.method_stats.get(name)  # empty: metrics off
        started = 0.0
        if stats is not None:
            stats.started += 1
            started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            if isinstance(request, MalformedMessage):
                raise request.error()
            return await method(self, request, context)
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as error:
            code, message, metadata = grpc_error(error, f"gRPC {name}")
            await context.abort(code, message, trailing_metadata=metadata)
        finally:
            if stats is not None:
                stats.finished(code.name, time.perf_counter() - started)
        raise AssertionError("context.abort always raises")

    wrapper.__name__ = method.__name__
    return wrapper


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(
        self,
        dataplane: DataPlane,
        shutdown: ShutdownSignal,
        max_message_length: int,
        grpc_stats: GrpcStats | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.dataplane = dataplane
        self.shutdown = shutdown
        self.tracing = tracing  # notes a traced ModelInfer's model work (observability/tracing.py)
        # Answers beyond it are refused here, with a message: grpcio would fail the
        # call (and end a whole stream) with a traceback in the log. None: no limit.
        self.max_answer_size = (
            None if max_message_length == UNLIMITED else max_message_length - _STREAM_WRAPPING
        )
        # Each method's counters, bound once (none when metrics are off).
        self.method_stats: dict[str, GrpcMethodStats] = {}
        if grpc_stats is not None:
            self.method_stats = _method_stats(grpc_stats)

    @_handles_errors
    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.dataplane.live())

    @_handles_errors
    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.dataplane.ready())

    @_handles_errors
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Any
    ) -> pb.ModelReadyResponse:
        ready = self.dataplane.model_ready(request.name, request.version or None)
        return pb.ModelReadyResponse(ready=ready)

    @_handles_errors
    async def ServerMetadata(self, request: Any, context: Any) -> pb.ServerMetadataResponse:
        return encode_server_metadata(self.dataplane.server_metadata())

    @_handles_errors
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Any
    ) -> pb.ModelMetadataResponse:
        metadata = self.dataplane.model_metadata(request.name, request.version or None)
        return encode_model_metadata(metadata)

    @_handles_errors
    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Any
    ) -> pb.ModelInferResponse:
        return await self._infer(request, context)

    async def _infer(self, message: pb.ModelInferRequest, call: Any) -> pb.ModelInferResponse:
        regions = self.dataplane.shared_memory
        request = _decoded(message, regions)
        name, version, tracing = message.model_name, message.model_version or None, self.tracing
        trace = tracing.inference(name, version) if tracing is not None else None
        # headers: read only by runtimes that ask for them (serving/runtime_headers.py)
        context = RequestContext(headers=call, trace=trace)
        response = await self.dataplane.infer(name, version, request, context)
        if trace is not None and tracing is not None:
            tracing.answered(trace, response)
        if context.response_headers:  # a runtime set some: MLServer trails them
            trailing = context.response_headers.items()
            call.set_trailing_metadata(tuple((key.lower(), value) for key, value in trailing))
        shared = None
        if regions is not None and request.outputs:
            shared = write_outputs(regions, request.outputs, response.outputs)
        return self._encoded(message, response, wants_raw_output(request), shared=shared)

    async def _infer_stream(
        self, message: pb.ModelInferRequest
    ) -> AsyncGenerator[list[pb.ModelStreamInferResponse], None]:
        """One request of a stream: its answers as soon as the model yields them, in
        lists of those ready together."""
        regions = self.dataplane.shared_memory
        request = _decoded(message, regions)
        raw = wants_raw_output(request)
        responses = self.dataplane.infer_stream(
            message.model_name, message.model_version or None, request
        )
        async with contextlib.aclosing(responses):
            async for ready in responses:
                answers = []
                for response in ready:
                    answer = pb.ModelStreamInferResponse()
                    shared = None
                    if regions is not None and request.outputs:
                        shared = write_outputs(regions, request.outputs, response.outputs)
                    self._encoded(message, response, raw, answer.infer_response, shared)
                    answers.append(answer)
                yield answers

    def _encoded(
        self,
        message: pb.ModelInferRequest,
        response: InferenceResponse,
        raw: bool,
        into: pb.ModelInferResponse | None = None,
        shared: dict[str, dict[str, Any]] | None = None,
    ) -> pb.ModelInferResponse:
        answer = encode_infer_response(response, raw, into, shared)
        if self.max_answer_size is None:
            return answer
        size = answer.ByteSize()
        if size > self.max_answer_size:
            raise PayloadTooLarge(
                f"The answer of model {message.model_name!r} is {size} bytes, "
                f"over grpc_max_message_length ({self.max_answer_size + _STREAM_WRAPPING}); "
                + (
                    "ask for fewer outputs or raise grpc_max_message_length"
                    if raw
                    else "leave out the raw_output parameter: raw outputs are smaller"
                )
            )
        return answer

    def _streams(self, message: pb.ModelInferRequest) -> bool:
        """Whether the request goes to a ready model that streams (the stream sends
        its responses as they come; other models' answers keep their request's place)."""
        try:
            return self.dataplane.model_streams(message.model_name, message.model_version or None)
        except InferdError:
            return False  # its error is answered in order

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[StreamRequest], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Answer each request of the stream, several at once, as the models answer."""
        stats = self.method_stats.get("ModelStreamInfer")  # None: metrics off
        started = time.perf_counter()
        if stats is not None:
            stats.started += 1
        code = grpc.StatusCode.CANCELLED  # unless it ends in one of the ways below
        try:
            answers = answer_stream(
                request_iterator, context, self._infer_stream, self._streams, self.shutdown
            )
            async with contextlib.aclosing(answers) as out:
                async for made in out:
                    for answer in made:
                        yield answer
            code = grpc.StatusCode.OK
        except grpc.aio.AbortError:
            code = grpc.StatusCode.UNAVAILABLE  # its only abort: the server is shutting down
            raise
        except Exception:
            code = grpc.StatusCode.UNKNOWN
            raise
        finally:
            if stats is not None:
                stats.finished(code.name, time.perf_counter() - started)

    @_handles_errors
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Any
    ) -> pb.ModelStatisticsResponse:
        """Triton's statistics extension: every model, one model, or one version."""
        found = self.dataplane.statistics(request.name or None, request.version or None)
        return pb.ModelStatisticsResponse(
            model_stats=[
                json_format.ParseDict(stats.to_dict(), pb.ModelStatistics()) for stats in found
            ]
        )

    @_handles_errors
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Any
    ) -> pb.RepositoryIndexResponse:
        # proto3 cannot tell "ready: false" from unset; false lists every model.
        return encode_repository_index(self.dataplane.index(True if request.ready else None))

    @_handles_errors
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> pb.RepositoryModelLoadResponse:
        name = _model_name(request.model_name)
        parameters = {key: _repository_value(value) for key, value in request.parameters.items()}
        config = load_config(name, parameters, ignored=frozenset())
        await self.dataplane.load(name, config)
        return pb.RepositoryModelLoadResponse()

    @_handles_errors
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> pb.RepositoryModelUnloadResponse:
        # tritonclient always sends unload_dependents; inferd models have no dependents.
        _refuse_parameters(request.parameters, ignored={"unload_dependents"})
        await self.dataplane.unload(_model_name(request.model_name))
        return pb.RepositoryModelUnloadResponse()

    # Shared memory extension (server/shm_api.py)

    @_handles_errors
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Any
    ) -> pb.SystemSharedMemoryStatusResponse:
        return shm_api.grpc_status(self.dataplane, request.name)

    @_handles_errors
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Any
    ) -> pb.SystemSharedMemoryRegisterResponse:
        return shm_api.grpc_register(self.dataplane, request)

    @_handles_errors
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        return shm_api.grpc_unregister(self.dataplane, request.name)

    @_handles_errors
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Any
    ) -> pb.CudaSharedMemoryStatusResponse:
        return shm_api.grpc_cuda_status(self.dataplane, request.name)

    @_handles_errors
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Any
    ) -> pb.CudaSharedMemoryRegisterResponse:
        return shm_api.grpc_cuda_register(self.dataplane, request)

    @_handles_errors
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Any
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        return shm_api.grpc_cuda_unregister(self.dataplane, request.name)

    # Triton's model configuration and logging extensions

    @_handles_errors
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Any
    ) -> pb.ModelConfigResponse:
        config = self.dataplane.model_config(request.name, request.version or None)
        return encode_model_config(config)

    @_handles_errors
    async def LogSettings(
        self, request: pb.LogSettingsRequest, context: Any
    ) -> pb.LogSettingsResponse:
        changes = decode_grpc_log_settings(request)
        return encode_grpc_log_settings(self.dataplane.log_settings(changes))


def _repository_value(value: pb.ModelRepositoryParameter) -> Any:
    kind = value.WhichOneof("parameter_choice")
    return None if kind is None else getattr(value, kind)


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


def _decoded(
    message: pb.ModelInferRequest, regions: SharedMemoryRegistry | None
) -> InferenceRequest:
    if not message.model_name:
        raise InvalidRequest("model_name is required")
    return decode_infer_request(message, regions)


def _model_name(name: str) -> str:
    if not name:
        raise InvalidRequest("model_name is required")
    return name


def _refuse_parameters(parameters: Any, ignored: set[str] | None = None) -> None:
    unsupported = sorted(set(parameters) - (ignored or set()))
    if unsupported:
        raise InvalidRequest(
            f"Repository parameters ({', '.join(unsupported)}) are not supported; "
            "inferd loads models as model-settings.json describes them on disk"
        )
