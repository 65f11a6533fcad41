"""The runtime base class: subclass :class:`Model` to serve your own model.

A runtime implements ``load()`` (read artifacts from ``self.settings.uri``) and
``predict(request) -> response``; ``predict`` may be a plain function or a
coroutine. A runtime that answers with many responses (tokens, partial results,
progress) implements ``predict_stream(request)`` as a generator or an async
generator, served by the streaming endpoints. Requests arrive with numpy
tensors; the ``decode`` / ``encode`` helpers apply MLServer's content types
(``np``, ``str``, ``base64``, ``datetime``, ``pd``) so a runtime never touches
wire details.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from typing import Any

from inferd import model_calls
from inferd.settings import ModelSettings
from inferd.settings.model import NamedBySettings
from inferd.tensors import codecs
from inferd.types import (
    InferenceRequest,
    InferenceResponse,
    MetadataTensor,
    ModelMetadata,
    Tensor,
)


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """Where a runtime instance runs.

    ``worker_index`` is 0..N-1 in a pool of N worker processes and -1 when
    inference runs in the server's main process. ``device`` is the device
    assigned to this worker (e.g. ``"cuda:1"``), or None.
    """

    worker_index: int = -1
    device: str | None = None

    async def infer(
        self, model: str, request: InferenceRequest, version: str | None = None
    ) -> InferenceResponse:
        """Run ``request`` on another model of this server, through its queue and
        batcher as a client's request (see :mod:`inferd.model_calls`)."""
        return await model_calls.infer(model, request, version)

    def infer_stream(
        self, model: str, request: InferenceRequest, version: str | None = None
    ) -> AsyncIterator[InferenceResponse]:
        """The responses of another model's stream, as they arrive."""
        return model_calls.infer_stream(model, request, version)


class Model(NamedBySettings):
    """Base class of every runtime. Override ``load`` and ``predict``."""

    def __init__(self, settings: ModelSettings, context: WorkerContext | None = None) -> None:
        self.settings = settings
        self.context = context or WorkerContext()
        self.ready = False

    async def load(self) -> bool | None:
        """Load the model's artifacts. Raise (or return False) to fail the load."""
        return True

    def predict(
        self, request: InferenceRequest
    ) -> InferenceResponse | Awaitable[InferenceResponse]:
        """Answer one request (or one merged batch of requests, with batching on).

        Override it as a plain ``def`` (fast, CPU-bound models) or ``async def``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement predict()")

    def predict_stream(
        self, request: InferenceRequest
    ) -> Iterator[InferenceResponse] | AsyncIterator[InferenceResponse]:
        """Answer one request with many responses, each yielded as soon as it is ready.

        Override it as a generator (``def`` with ``yield``: each stream then holds one
        of the model's ``threads_per_worker`` slots for its life) or an async generator
        (``async def`` with ``yield``: streams run interleaved on an event loop and
        hold no slot, up to ``max_concurrent_streams``). Cleanup in a ``finally`` runs
        when the client goes away. Served by ``/infer_stream`` and ``/generate_stream``
        (REST) and ``ModelStreamInfer`` (gRPC).
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement predict_stream()")

    @property
    def predicts(self) -> bool:
        """Whether ``/infer`` and ``ModelInfer`` call ``predict`` (else the model only
        streams: they refuse it, naming the streaming endpoints, and ``/generate``
        answers its one streamed response). By default: whether the runtime implements
        it; read once, after ``load``."""
        return overrides(self, "predict")

    @property
    def streams(self) -> bool:
        """Whether the streaming endpoints call ``predict_stream`` (else they answer with
        ``predict``'s one response). By default: whether the runtime implements it. A
        runtime that streams only in some configurations (a pipeline's task) says so
        here; it is read once, after ``load``."""
        return overrides(self, "predict_stream")

    def sequence_end(self, sequence_id: int | str) -> None:
        """A sequence is over: drop what this runtime kept for it (sequence_batching).

        Called in the process that served the sequence, after its request with
        ``sequence_end`` ran (for ``predict_stream``: its stream finished), or when it
        expired (no request for ``max_sequence_idle_microseconds``); never while one
        of its requests runs.
        Keep per-sequence state in a dict keyed by ``request.parameters["sequence_id"]``
        (created when ``sequence_start`` is true) and pop it here. A plain ``def``,
        quick: it runs where the worker reads its commands. Not called when the
        worker process died (its state died with it) or the model is unloaded.
        """

    async def unload(self) -> None:
        """Release what ``load`` acquired. Called once; the instance is dropped after."""

    def metadata(self) -> ModelMetadata:
        """What ``GET /v2/models/{name}`` reports; by default, the declared settings."""
        settings = self.settings
        return ModelMetadata(
            name=settings.name,
            platform=settings.platform,
            versions=list(settings.versions),
            inputs=[_metadata_tensor(tensor) for tensor in settings.inputs],
            outputs=[_metadata_tensor(tensor) for tensor in settings.outputs],
            parameters=_content_type_parameters(settings),
        )

    def decode(self, tensor: Tensor, default_content_type: str | None = None) -> Any:
        """One input as Python data, by its content type (or the given default)."""
        default = default_content_type or self._default_content_type
        return codecs.decode_tensor(tensor, default)

    def decode_request(
        self, request: InferenceRequest, default_content_type: str | None = None
    ) -> Any:
        """The whole request as Python data: a DataFrame for ``pd``, else the only
        input decoded, else a dict of decoded inputs by name."""
        default = default_content_type or self._default_content_type
        return codecs.decode_request(request, default)

    def encode(self, name: str, value: Any, content_type: str | None = None) -> Tensor:
        """One output tensor from Python data (array, list of str, ...)."""
        return codecs.encode_tensor(name, value, content_type)

    def encode_response(
        self, value: Any, content_type: str | None = None, request: InferenceRequest | None = None
    ) -> InferenceResponse:
        """A response holding ``value`` (an array, a dict of arrays, a DataFrame, ...),
        with this model's name and version, echoing the request's id."""
        return InferenceResponse(
            outputs=codecs.encode_outputs(value, content_type),
            model_name=self.name,
            model_version=self.version,
            id=request.id if request is not None else None,
        )

    @property
    def _default_content_type(self) -> str | None:
        parameters = self.settings.parameters
        return parameters.content_type if parameters else None


def _metadata_tensor(tensor: Any) -> MetadataTensor:
    return MetadataTensor(
        name=tensor.name,
        datatype=tensor.datatype,
        shape=list(tensor.shape),
        parameters=dict(tensor.parameters or {}),
    )


def _content_type_parameters(settings: ModelSettings) -> dict[str, Any]:
    parameters = settings.parameters
    if parameters and parameters.content_type:
        return {"content_type": parameters.content_type}
    return {}


def overrides(model: Model, method: str) -> bool:
    """Whether the runtime implements ``method`` (``predict``, ``predict_stream``)."""
    return getattr(type(model), method, None) is not getattr(Model, method)
