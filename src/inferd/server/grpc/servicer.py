"""The Open Inference Protocol over gRPC (``inference.GRPCInferenceService``).

Served by ``grpc.aio`` on ``grpc_port``, in the same event loop as the REST
server and from the same DataPlane, so a model answers the same on both.
Each method is one call through the gRPC edge (:mod:`inferd.server.grpc.edge`),
which checks access, traces, counts and answers errors as status codes, and runs
inference; message conversion lives in :mod:`inferd.server.grpc.codec`.

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

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
from google.protobuf import json_format

from inferd.errors import InvalidRequest
from inferd.protocol import pb, pb_grpc
from inferd.server import trace_api
from inferd.server.codec_triton import (
    decode_grpc_log_settings,
    encode_grpc_log_settings,
    encode_model_config,
    load_config,
)
from inferd.server.grpc.codec import (
    encode_model_metadata,
    encode_repository_index,
    encode_server_metadata,
)
from inferd.server.grpc.edge import GrpcEdge
from inferd.server.grpc.health import ShutdownSignal
from inferd.server.grpc.stream import StreamRequest
from inferd.serving import dependents
from inferd.serving.shared_memory import SharedMemoryOperations
from inferd.triton.shm import CUDA, SYSTEM

Request = TypeVar("Request")
Response = TypeVar("Response")
Handler = Callable[[Any, Request, Any], Awaitable[Response]]


def _through_edge(method: Handler[Request, Response]) -> Handler[Request, Response]:
    """Answer the call through the gRPC edge: access, span, counters, errors as codes."""
    name = method.__name__

    async def wrapper(self: InferenceServicer, request: Request, context: Any) -> Response:
        return await self.edge.unary(name, method.__get__(self), request, context)

    wrapper.__name__ = name
    return wrapper


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """The V2 service's methods, each a call through ``edge``."""

    def __init__(self, edge: GrpcEdge, shutdown: ShutdownSignal) -> None:
        self.edge = edge
        self.dataplane = edge.dataplane
        self.server_wide = edge.server_wide
        self.shared_memory = SharedMemoryOperations(edge.dataplane, edge.server_wide)
        self.shutdown = shutdown

    @_through_edge
    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.dataplane.live())

    @_through_edge
    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.dataplane.ready())

    @_through_edge
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Any
    ) -> pb.ModelReadyResponse:
        ready = self.dataplane.model_ready(request.name, request.version or None)
        return pb.ModelReadyResponse(ready=ready)

    @_through_edge
    async def ServerMetadata(self, request: Any, context: Any) -> pb.ServerMetadataResponse:
        return encode_server_metadata(self.dataplane.server_metadata())

    @_through_edge
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Any
    ) -> pb.ModelMetadataResponse:
        metadata = self.dataplane.model_metadata(request.name, request.version or None)
        return encode_model_metadata(metadata)

    @_through_edge
    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Any
    ) -> pb.ModelInferResponse:
        return await self.edge.infer(request, context)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[StreamRequest], context: Any
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Answer each request of the stream, several at once, as the models answer."""
        async for answer in self.edge.stream(request_iterator, context, self.shutdown):
            yield answer

    @_through_edge
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Any
    ) -> pb.ModelStatisticsResponse:
        """Triton's statistics extension: every model, one model, or one version."""
        found = await self.server_wide.statistics(request.name or None, request.version or None)
        return pb.ModelStatisticsResponse(
            model_stats=[json_format.ParseDict(stats, pb.ModelStatistics()) for stats in found]
        )

    @_through_edge
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Any
    ) -> pb.RepositoryIndexResponse:
        # proto3 cannot tell "ready: false" from unset; false lists every model.
        return encode_repository_index(self.dataplane.index(True if request.ready else None))

    @_through_edge
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Any
    ) -> pb.RepositoryModelLoadResponse:
        name = _model_name(request.model_name)
        parameters = {key: _repository_value(value) for key, value in request.parameters.items()}
        config = load_config(name, parameters, ignored=frozenset())
        await self.server_wide.load(name, config)
        return pb.RepositoryModelLoadResponse()

    @_through_edge
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Any
    ) -> pb.RepositoryModelUnloadResponse:
        # tritonclient always sends unload_dependents: true unloads an ensemble's steps.
        _refuse_parameters(request.parameters, ignored={dependents.UNLOAD_DEPENDENTS})
        asked = request.parameters.get(dependents.UNLOAD_DEPENDENTS)
        with_dependents = asked is not None and asked.bool_param
        name = _model_name(request.model_name)
        registry = self.dataplane.registry
        await dependents.unload(self.server_wide, registry, name, with_dependents)
        return pb.RepositoryModelUnloadResponse()

    # Shared memory extension: each call one operation of serving/shared_memory.py

    @_through_edge
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Any
    ) -> pb.SystemSharedMemoryStatusResponse:
        answer = pb.SystemSharedMemoryStatusResponse()
        _fill_status(answer, self.shared_memory.system_status(request.name))
        return answer

    @_through_edge
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Any
    ) -> pb.SystemSharedMemoryRegisterResponse:
        await self.shared_memory.register_system(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @_through_edge
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Any
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self.shared_memory.unregister(SYSTEM, request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @_through_edge
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Any
    ) -> pb.CudaSharedMemoryStatusResponse:
        answer = pb.CudaSharedMemoryStatusResponse()
        _fill_status(answer, self.shared_memory.cuda_status(request.name))
        return answer

    @_through_edge
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Any
    ) -> pb.CudaSharedMemoryRegisterResponse:
        await self.shared_memory.register_cuda(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @_through_edge
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Any
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        await self.shared_memory.unregister(CUDA, request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # Triton's model configuration and logging extensions

    @_through_edge
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Any
    ) -> pb.ModelConfigResponse:
        config = self.dataplane.model_config(request.name, request.version or None)
        return encode_model_config(config)

    @_through_edge
    async def LogSettings(
        self, request: pb.LogSettingsRequest, context: Any
    ) -> pb.LogSettingsResponse:
        changes = decode_grpc_log_settings(request)
        if not changes:  # a read, as REST's GET
            return encode_grpc_log_settings(self.dataplane.log_settings())
        return encode_grpc_log_settings(await self.server_wide.change_log_settings(changes))

    # Triton's trace extension (server/trace_api.py)

    @_through_edge
    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: Any
    ) -> pb.TraceSettingResponse:
        return await trace_api.grpc_trace_setting(self.dataplane, self.server_wide, request)


def _repository_value(value: pb.ModelRepositoryParameter) -> Any:
    kind = value.WhichOneof("parameter_choice")
    return None if kind is None else getattr(value, kind)


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


def _fill_status(answer: Any, regions: Sequence[msgspec.Struct]) -> None:
    """A shared memory status answer (system or CUDA: the same map of regions) holding
    ``regions``."""
    for region in regions:
        fields = msgspec.structs.asdict(region)
        answer.regions[fields["name"]].CopyFrom(type(answer).RegionStatus(**fields))
