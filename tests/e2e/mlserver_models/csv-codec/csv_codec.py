from typing import Any

import numpy as np
from mlserver import MLModel
from mlserver.codecs import InputCodec, NumpyCodec, register_input_codec
from mlserver.types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput


@register_input_codec
class LinesCodec(InputCodec):
    """One text of comma-separated lines (content type "csv-lines") as the rows of
    numbers the model declares (``rows``, FP64): the request's input is not the
    model's, its codec makes it so (MLServer reads declared inputs as metadata)."""

    ContentType = "csv-lines"

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return False

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> np.ndarray:
        rows = []
        for item in request_input.data:
            text = item.decode() if isinstance(item, bytes) else item
            rows += [[float(v) for v in line.split(",")] for line in text.splitlines()]
        return np.array(rows, dtype=np.float64)

    @classmethod
    def encode_output(cls, name: str, payload: Any, **kwargs: Any) -> ResponseOutput:
        raise NotImplementedError


class LineSums(MLModel):
    """Sums each row of the declared input ``rows``, decoded from whatever input the
    request sends with content type "csv-lines"."""

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        rows = self.decode(payload.inputs[0])
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output("sums", rows.sum(axis=1, keepdims=True))],
        )
