"""Per-model-version dispatch from the main process to the pool.

One :class:`Scheduler` exists per loaded model version. Requests go to the pool
as they come; the pool's free slots bound the work in flight.
"""

from __future__ import annotations

from .types import InferenceRequest, InferenceResponse
from .workers.base import Pool


class Scheduler:
    def __init__(self, pool: Pool, instance_id: int) -> None:
        self._pool = pool
        self.instance_id = instance_id

    async def submit(self, request: InferenceRequest) -> InferenceResponse:
        return await self._pool.predict(self.instance_id, request)

    async def close(self) -> None:
        """Stop taking requests; those already submitted finish."""
