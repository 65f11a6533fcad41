"""Custom runtimes the end-to-end tests serve (copied into each test model's folder)."""

from __future__ import annotations

import os

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
