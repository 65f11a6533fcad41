"""A runtime whose model is big: ``load`` reads every byte of a numpy file (the
weights benchmarks/load_on_request.py writes, ``--model big``), as a large model's
load reads its weights; ``predict`` multiplies the input by a few rows of them."""

from __future__ import annotations

import numpy as np

from inferd import InferenceRequest, InferenceResponse, Model, Tensor


class BigModel(Model):
    async def load(self) -> bool:
        self.weights = np.load(self.settings.uri)  # read whole, not mapped: the load's cost
        return True

    def predict(self, request: InferenceRequest) -> InferenceResponse:
        x = np.asarray(request.input("x").data, dtype=np.float32)
        return InferenceResponse(outputs=[Tensor("y", x @ self.weights[:16].T)])
