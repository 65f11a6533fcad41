"""The in-process pool (``parallel_workers: 0``): runtimes run in the main process.

It has the same interface as the process pool, so the scheduler does not care
where a model runs. A synchronous ``predict`` is called on the event loop
directly: for fast models (the common case) a thread hop costs more than the
prediction; slow models belong in worker processes. With ``threads_per_worker``
above 1, a synchronous ``predict`` runs in that many threads of its own instead
(for models that wait on I/O or a GPU), and an async one that many at a time.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import cast

import numpy as np

from .. import custom_metrics
from ..datatypes import datatype_of
from ..errors import InferdError, ModelError, ModelNotReady
from ..model import Model, WorkerContext
from ..settings import ModelSettings
from ..types import InferenceRequest, InferenceResponse, ModelMetadata, Tensor
from .base import Execution
from .runtime_loader import LoadedModel, describe, load_runtime

logger = logging.getLogger(__name__)


class InProcessPool:
    """Holds loaded runtimes by instance id and calls them directly."""

    def __init__(self) -> None:
        self._models: dict[int, LoadedModel] = {}

    async def start(self) -> None:
        """Nothing to start: runtimes are loaded on demand."""

    async def close(self) -> None:
        for instance_id in list(self._models):
            await self.unload(instance_id)

    async def load(self, instance_id: int, settings: ModelSettings) -> ModelMetadata:
        device = settings.devices[0] if settings.devices else None
        labels = custom_metrics.model_labels(settings.name, settings.version)
        token = custom_metrics.set_model(labels)  # load() may log custom metrics too
        try:
            model = await load_runtime(settings, WorkerContext(device=device))
        finally:
            custom_metrics.reset_model(token)
        self._models[instance_id] = LoadedModel.of(model, labels)
        return model.metadata()

    async def unload(self, instance_id: int) -> None:
        loaded = self._models.pop(instance_id, None)
        if loaded is not None:
            await loaded.release()

    def predict(self, instance_id: int, request: InferenceRequest) -> Execution:
        loaded = self._models.get(instance_id)
        if loaded is None:
            raise ModelNotReady("This model version is no longer loaded; retry the request")
        return Execution.inline(self._call(loaded, request))

    async def _call(self, loaded: LoadedModel, request: InferenceRequest) -> InferenceResponse:
        model = loaded.model
        token = custom_metrics.set_model(loaded.labels)
        try:
            if loaded.threads is not None:
                loop = asyncio.get_running_loop()
                run = contextvars.copy_context().run  # the thread logs with the model's labels
                result = await loop.run_in_executor(loaded.threads, run, model.predict, request)
            else:
                result = model.predict(request)
                if loaded.is_async:
                    result = await cast(Awaitable[InferenceResponse], result)
            return checked_response(model, result)
        except InferdError:
            raise
        except Exception as error:
            raise as_inferd_error(model, error) from error
        finally:
            custom_metrics.reset_model(token)

    def capacity(self, instance_id: int) -> int:
        loaded = self._models.get(instance_id)
        return loaded.capacity if loaded is not None else 0

    def watch(self, instance_id: int, on_capacity_change: Callable[[], None]) -> None:
        """Capacity here is fixed at load time: there is nothing to report."""

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        """Runtimes in the main process never fail on their own: nothing to report."""


def as_inferd_error(model: Model, error: Exception) -> InferdError:
    """What the client sees when ``predict`` raised: InferdErrors as they are, else a 500."""
    if isinstance(error, InferdError):
        return error
    logger.error("Model %r failed while predicting", model.name, exc_info=error)
    return ModelError(f"Model {model.name!r} failed: {describe(error)}")


def checked_response(model: Model, response: object) -> InferenceResponse:
    """What ``predict`` returned, if the wire layers can send it; else a ModelError
    that says what is wrong (in every pool alike, not a bare 500 from the codec)."""
    if not isinstance(response, InferenceResponse):
        raise _bad_return(
            model, f"predict returned {type(response).__name__}, not an InferenceResponse"
        )
    for tensor in response.outputs:
        data = getattr(tensor, "data", None)
        if not isinstance(tensor, Tensor) or not isinstance(data, np.ndarray):
            got = type(data if isinstance(tensor, Tensor) else tensor).__name__
            raise _bad_return(
                model, f"each output must be a Tensor holding a numpy array, got {got}"
            )
        try:
            datatype_of(data.dtype)
        except ValueError as error:
            raise _bad_return(model, f"output {tensor.name!r}: {error}") from None
    return response


def _bad_return(model: Model, problem: str) -> ModelError:
    message = f"Model {model.name!r}: {problem}"
    logger.error("%s", message)  # a bug in the runtime: its author needs to see it
    return ModelError(message)
