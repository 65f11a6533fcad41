"""The interface every pool offers the scheduler and the registry."""

from __future__ import annotations

from typing import Protocol

from ..settings import ModelSettings
from ..types import InferenceRequest, InferenceResponse, ModelMetadata


class Pool(Protocol):
    """Runs model instances, each known by an id the registry hands out."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def load(self, instance_id: int, settings: ModelSettings) -> ModelMetadata:
        """Load one model version; its metadata, or an InferdError saying why not."""
        ...

    async def unload(self, instance_id: int) -> None: ...

    async def predict(self, instance_id: int, request: InferenceRequest) -> InferenceResponse: ...
