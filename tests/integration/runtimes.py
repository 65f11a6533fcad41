"""Tiny runtimes the integration tests serve in-process (``parallel_workers: 0``)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import numpy as np

from inferd import InferenceRequest, InferenceResponse, Model, Tensor


class Echo(Model):
    """Returns every input unchanged as an output of the same name."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        outputs = [Tensor(t.name, t.data, dict(t.parameters)) for t in request.inputs]
        return InferenceResponse(outputs=outputs, parameters=dict(request.parameters))


class Fails(Model):
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        raise ValueError("this model always fails")


class Gated(Model):
    """Holds each request until the test opens :attr:`gate`; records what it ran.

    Its state is the class's: the test that serves it resets it (``reset``) in its
    own event loop, and reaches it without a handle on the loaded instance."""

    gate: ClassVar[asyncio.Event] = asyncio.Event()
    running: ClassVar[int] = 0
    ran: ClassVar[list[float]] = []

    @classmethod
    def reset(cls) -> None:
        cls.gate = asyncio.Event()
        cls.running = 0
        cls.ran = []

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = request.input("x").data
        Gated.running += 1
        try:
            await Gated.gate.wait()
        finally:
            Gated.running -= 1
        Gated.ran.extend(float(value) for value in np.ravel(x))
        return InferenceResponse(outputs=[Tensor("y", x * 2)])
