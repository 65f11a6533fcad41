import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyRequestCodec
from mlserver.handlers import custom_handler
from mlserver.types import InferenceRequest, InferenceResponse


class HandlerModel(MLModel):
    """Counts its predictions; a custom route reports the count, another echoes JSON."""

    async def load(self) -> bool:
        self.calls = 0
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        self.calls += 1
        headers = payload.parameters.headers or {}
        tag = headers.get("x-tag", "")
        response = NumpyRequestCodec.encode_response(self.name, np.array([self.calls]))
        response.parameters.headers = {"x-echo-tag": tag}
        return response

    @custom_handler(rest_path="/handler-model/stats", rest_method="GET")
    async def stats(self) -> dict:
        return {"calls": self.calls, "name": self.name}

    @custom_handler(rest_path="/handler-model/echo")
    async def echo(self, payload: dict) -> dict:
        return {"received": payload, "calls": self.calls}
