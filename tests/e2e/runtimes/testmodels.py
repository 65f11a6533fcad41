"""Custom runtimes the end-to-end tests serve (copied into each test model's folder)."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np

from inferd import InferenceRequest, InferenceResponse, Model, Tensor


class Echo(Model):
    """Returns every input unchanged as an output of the same name."""

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        outputs = [Tensor(t.name, t.data, dict(t.parameters)) for t in request.inputs]
        return InferenceResponse(outputs=outputs, parameters=dict(request.parameters))


class AsyncDouble(Model):
    """An async predict: doubles a numeric input ``x``; reports its version and pid."""

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = request.input("x").data
        version = self.version or ""
        return InferenceResponse(
            outputs=[
                Tensor("y", x * 2),
                Tensor("version", np.array([version.encode()], dtype=object)),
                Tensor("pid", np.array([os.getpid()], dtype=np.int64)),
            ]
        )


class FailsToPredict(Model):
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        raise ValueError("this model always fails")


class FailsToLoad(Model):
    async def load(self) -> bool:
        raise RuntimeError("cannot find the weights")


class GatedLoad(Model):
    """Loads only once the file named by ``extra["gate"]`` exists in its folder.

    Lets a test hold a load in flight and look at the server meanwhile. It writes
    ``loading-<tag>`` when its load starts and ``unloaded-<tag>`` when it is
    unloaded; predict answers one BYTES output ``tag`` holding ``extra["tag"]``.
    """

    LOAD_DEADLINE = 60.0

    @property
    def tag(self) -> str:
        return str(self.settings.extra.get("tag", ""))

    async def load(self) -> bool:
        folder = self.settings.folder
        (folder / f"loading-{self.tag}").touch()
        gate = folder / str(self.settings.extra.get("gate", "gate"))
        deadline = time.monotonic() + self.LOAD_DEADLINE
        while not gate.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{gate} did not appear")
            await asyncio.sleep(0.01)
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        tag = np.array([self.tag.encode()], dtype=object)
        return InferenceResponse(outputs=[Tensor("tag", tag)])

    async def unload(self) -> None:
        (self.settings.folder / f"unloaded-{self.tag}").touch()
