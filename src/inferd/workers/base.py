"""The interface every pool offers the scheduler and the registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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

    async def unload(self, instance_id: int) -> None:
        """Unload an instance; one that is not loaded (or failed to load) is ignored."""
        ...

    def predict(self, instance_id: int, request: InferenceRequest) -> Awaitable[InferenceResponse]:
        """Run one request on the instance (the scheduler keeps within its capacity).

        An ``async def`` will do; the process pool returns a future instead, having
        sent the request before it returns, so a slot handed on is used at once."""
        ...

    def capacity(self, instance_id: int) -> int:
        """How many requests the instance can run at once right now; 0 if none."""
        ...

    def watch(self, instance_id: int, on_capacity_change: Callable[[], None]) -> None:
        """Call ``on_capacity_change`` whenever the instance's capacity changes
        (a worker holding it died, or came back), until it is unloaded."""
        ...

    def on_instance_failed(self, handler: Callable[[int, str], None]) -> None:
        """Call ``handler(instance_id, reason)`` when the pool gives up serving an
        instance on its own (e.g. its load keeps crashing the worker process)."""
        ...
