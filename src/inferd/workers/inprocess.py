"""The in-process pool (``parallel_workers: 0``): runtimes run in the main process.

It has the same interface as the process pool, so the scheduler does not care
where a model runs. A synchronous ``predict`` is called on the event loop
directly: for fast models (the common case) a thread hop costs more than the
prediction; slow models belong in worker processes.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable
from typing import cast

from ..errors import InferdError, ModelError
from ..model import Model, WorkerContext
from ..settings import ModelSettings
from ..types import InferenceRequest, InferenceResponse, ModelMetadata
from .runtime_loader import describe, load_runtime

logger = logging.getLogger(__name__)


class InProcessPool:
    """Holds loaded runtimes by instance id and calls them directly."""

    def __init__(self) -> None:
        self._models: dict[int, Model] = {}
        self._async_predict: dict[int, bool] = {}

    async def start(self) -> None:
        """Nothing to start: runtimes are loaded on demand."""

    async def close(self) -> None:
        for instance_id in list(self._models):
            await self.unload(instance_id)

    async def load(self, instance_id: int, settings: ModelSettings) -> ModelMetadata:
        model = await load_runtime(settings, WorkerContext())
        self._models[instance_id] = model
        self._async_predict[instance_id] = inspect.iscoroutinefunction(model.predict)
        return model.metadata()

    async def unload(self, instance_id: int) -> None:
        model = self._models.pop(instance_id, None)
        self._async_predict.pop(instance_id, None)
        if model is None:
            return
        try:
            await model.unload()
        except Exception:
            logger.exception("Unloading model %r raised; it is dropped anyway", model.name)

    async def predict(self, instance_id: int, request: InferenceRequest) -> InferenceResponse:
        model = self._models[instance_id]
        try:
            result = model.predict(request)
            if self._async_predict[instance_id]:
                return await cast(Awaitable[InferenceResponse], result)
            return cast(InferenceResponse, result)
        except InferdError:
            raise
        except Exception as error:
            logger.exception("Model %r failed while predicting", model.name)
            raise ModelError(f"Model {model.name!r} failed: {describe(error)}") from error
