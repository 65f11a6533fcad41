"""A model repository served as a Ray Serve application (``pip install inferd[ray]``).

    serve run inferd.ray:build model_repository=/models
    serve deploy deploy/ray/serve-config.yaml

Each replica is one whole inferd data plane: the repository's models, their
schedulers, batching and worker processes, as ``inferd start`` runs them, less the
listening sockets. Ray places the replicas, restarts them, scales their number and
routes requests to them: REST through Ray's HTTP proxy to the replica's ASGI app
(the V2 paths unchanged), gRPC through Ray's gRPC proxy to the replica's methods
named after the V2 service's RPCs (``ModelInfer``, ...), which answer what inferd's
gRPC server answers. Both go through inferd's protocol edges (server/rest/edge.py,
server/grpc/edge.py), so ``restricted_apis`` and ``model_repository_api`` hold
through Ray's proxies as they do on inferd's own ports. With one application Ray
routes gRPC calls without the ``application`` metadata, so tritonclient works
unchanged through both proxies.
Ray's gRPC proxy must register the V2 service: ``grpc_options.grpc_servicer_functions:
[inferd.ray.add_inference_service]`` (requests reach the replica as bytes). ``ModelStreamInfer`` (a
bidirectional stream) is not served through Ray.

Why a whole data plane per replica rather than a deployment per model behind a V2
front deployment: batching needs requests to meet. A replica that holds every model
collects one model's concurrent requests into batches as inferd does; a per-model
deployment would add a hop through Ray's object store for every request and split
a model's traffic across replicas that batch separately anyway. Models that need
their own scale run as separate applications, one repository each.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inferd.server.app import InferenceServer
from inferd.server.grpc.health import ShutdownSignal
from inferd.server.grpc.registration import add_inference_service_passing_bytes, request_parsers
from inferd.server.grpc.servicer import InferenceServicer
from inferd.settings.loader import load_server_settings

try:
    from ray import serve
except ImportError as error:  # pragma: no cover: the message is the point
    raise ImportError(
        "inferd.ray needs Ray Serve: pip install 'inferd[ray]' (ray[serve])"
    ) from error

logger = logging.getLogger(__name__)

# For Ray's gRPC proxy: grpc_options.grpc_servicer_functions names this.
add_inference_service = add_inference_service_passing_bytes

# Ray's defaults (5 in flight per replica, scale out at 2) would keep batches at a
# few rows: a replica must hold enough requests at once for its batches to fill.
DEFAULT_MAX_ONGOING_REQUESTS = 256
DEFAULT_TARGET_ONGOING_REQUESTS = 32


class RayAppArgs(BaseModel):
    """The arguments of ``serve run inferd.ray:build key=value ...``."""

    model_config = ConfigDict(extra="forbid")

    model_repository: str
    """The folder ``inferd start`` would serve; it must be on every node (or shared)."""
    num_replicas: int | Literal["auto"] = 1
    """Replicas of the data plane; "auto": autoscaled between min and max replicas."""
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=4, ge=1)
    target_ongoing_requests: float = Field(default=DEFAULT_TARGET_ONGOING_REQUESTS, gt=0)
    """Requests in flight per replica that autoscaling aims at: keep it at least
    max_batch_size x parallel_workers, so batches fill before a replica is added."""
    max_ongoing_requests: int = Field(default=DEFAULT_MAX_ONGOING_REQUESTS, ge=1)
    """Most requests Ray sends one replica at once; more wait in Ray's proxies."""
    num_cpus: float = Field(default=1.0, gt=0)
    """CPUs Ray reserves for each replica: its main process and its worker processes."""
    parallel_workers: int | None = Field(default=None, ge=0)
    """inferd's worker processes per replica (default: settings.json's, else 1)."""

    @model_validator(mode="after")
    def _targets_fit(self) -> RayAppArgs:
        if self.target_ongoing_requests > self.max_ongoing_requests:
            raise ValueError("target_ongoing_requests must not exceed max_ongoing_requests")
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        return self

    def deployment_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "max_ongoing_requests": self.max_ongoing_requests,
            "ray_actor_options": {"num_cpus": self.num_cpus},
        }
        if self.num_replicas == "auto":
            options["autoscaling_config"] = {
                "min_replicas": self.min_replicas,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": self.target_ongoing_requests,
            }
        else:
            options["num_replicas"] = self.num_replicas
        return options


class _Aborted(Exception):
    """A gRPC call answered with an error status (set on Ray's gRPC context)."""


class _RayGrpcContext:
    """What the gRPC edge needs of a call, over Ray's context: the client's metadata
    (access, headers for runtimes, the caller's trace), trailing metadata, and abort,
    which sets the status code and details Ray's proxy then answers with."""

    def __init__(self, grpc_context: Any) -> None:
        self._context = grpc_context

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata() if self._context is not None else ()

    def set_trailing_metadata(self, metadata: Any) -> None:
        if self._context is not None:
            self._context.set_trailing_metadata(list(metadata))

    async def abort(self, code: Any, details: str, trailing_metadata: Any = ()) -> None:
        if self._context is not None:
            self._context.set_code(code)
            self._context.set_details(details)
        raise _Aborted(details)


class _Lifespan:
    """Answers the ASGI lifespan protocol (Ray runs it) and passes requests on."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


class InferdReplica:
    """One replica: an inferd data plane serving the repository, without sockets."""

    # Ray awaits an async constructor: the replica takes requests once models are loaded.
    async def __init__(  # type: ignore[misc]
        self, model_repository: str, parallel_workers: int | None = None
    ) -> None:
        overrides: dict[str, Any] = {}
        if parallel_workers is not None:
            overrides["parallel_workers"] = parallel_workers
        settings = load_server_settings(Path(model_repository), **overrides)
        self.server = InferenceServer(settings)
        await self.server.pool.start()
        await self.server.load_startup_models()
        self._parsers = request_parsers()
        # Through the gRPC edge, as inferd's gRPC server: the same access checks
        # (restricted_apis, model_repository_api), spans and headers.
        self.servicer = InferenceServicer(self.server.grpc_edge(), ShutdownSignal())

    def __serve_build_asgi_app__(self) -> Any:
        return _Lifespan(self.server.served_rest_app())

    def check_health(self) -> None:
        """Ray restarts a replica whose worker pool died (not one with a broken model:
        a restart would not mend its files)."""
        if not self.server.dataplane.live():
            raise RuntimeError("inferd's data plane is not live")

    async def __del__(self) -> None:
        await asyncio.shield(self.server.close())

    async def _grpc(self, method: str, data: bytes, grpc_context: Any) -> Any:
        handler = getattr(self.servicer, method)
        request = self._parsers[method](data)  # a malformed one is answered INVALID_ARGUMENT
        # The edge turns every error into a status code (through abort).
        return await handler(request, _RayGrpcContext(grpc_context))

    # The V2 service's unary RPCs, as Ray's gRPC proxy calls them (by method name).

    async def ServerLive(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ServerLive", request, grpc_context)

    async def ServerReady(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ServerReady", request, grpc_context)

    async def ModelReady(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ModelReady", request, grpc_context)

    async def ServerMetadata(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ServerMetadata", request, grpc_context)

    async def ModelMetadata(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ModelMetadata", request, grpc_context)

    async def ModelInfer(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ModelInfer", request, grpc_context)

    async def ModelStatistics(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("ModelStatistics", request, grpc_context)

    async def RepositoryIndex(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("RepositoryIndex", request, grpc_context)

    async def RepositoryModelLoad(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("RepositoryModelLoad", request, grpc_context)

    async def RepositoryModelUnload(self, request: Any, grpc_context: Any = None) -> Any:
        return await self._grpc("RepositoryModelUnload", request, grpc_context)


def build(args: dict[str, Any]) -> Any:
    """The application ``serve run inferd.ray:build model_repository=PATH`` runs."""
    parsed = RayAppArgs(**args)
    deployment = serve.deployment(name="inferd", **parsed.deployment_options())(
        serve.ingress()(InferdReplica)
    )
    return deployment.bind(str(Path(parsed.model_repository).resolve()), parsed.parallel_workers)
