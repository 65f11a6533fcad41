"""Runtimes the model host's edge tests serve in process (test_host_edge.py)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from inferd import InferenceRequest, InferenceResponse, Model, Tensor
from inferd.errors import InvalidRequest


class Held(Model):
    """Echoes its input once the test releases the request (by its id, see
    :meth:`release`); records which requests run, and which stopped cancelled."""

    gates: ClassVar[dict[str | None, asyncio.Event]] = {}
    running: ClassVar[set[str | None]] = set()
    cancelled: ClassVar[list[str | None]] = []

    @classmethod
    def reset(cls) -> None:
        cls.gates, cls.running, cls.cancelled = {}, set(), []

    @classmethod
    def release(cls, request_id: str) -> None:
        cls.gates.setdefault(request_id, asyncio.Event()).set()

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        gate = Held.gates.setdefault(request.id, asyncio.Event())
        Held.running.add(request.id)
        try:
            await gate.wait()
        except asyncio.CancelledError:
            Held.cancelled.append(request.id)
            raise
        finally:
            Held.running.discard(request.id)
        outputs = [Tensor(t.name, t.data) for t in request.inputs]
        return InferenceResponse(outputs=outputs)


class Refuses(Model):
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        raise InvalidRequest("this model refuses every request")


class Headers(Model):
    """Reads the request header ``x-in`` and answers it in the response header ``x-out``."""

    wants_headers = True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        header = request.parameters["headers"].get("x-in", "")
        return InferenceResponse(outputs=[], parameters={"headers": {"x-out": header.upper()}})
