from typing import Any

import numpy as np
from mlserver import MLModel
from mlserver.codecs import InputCodec, NumpyCodec, register_input_codec
from mlserver.types import InferenceRequest, InferenceResponse, RequestInput, ResponseOutput


@register_input_codec
class CSVCodec(InputCodec):
    """Rows of comma-separated numbers (content type "csv") as lists of floats."""

    ContentType = "csv"

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return False

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> list:
        rows = []
        for item in request_input.data:
            text = item.decode() if isinstance(item, bytes) else item
            rows.append([float(value) for value in text.split(",")])
        return rows

    @classmethod
    def encode_output(cls, name: str, payload: list, **kwargs: Any) -> ResponseOutput:
        data = [",".join(str(value) for value in row) for row in payload]
        return ResponseOutput(
            name=name,
            datatype="BYTES",
            shape=[len(data), 1],
            data=data,
            parameters={"content_type": cls.ContentType},
        )


class CodecModel(MLModel):
    """Sums each CSV row (the input is tagged content type "csv")."""

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        rows = self.decode(payload.inputs[0])
        sums = np.array([sum(row) for row in rows], dtype=np.float64)
        return InferenceResponse(
            model_name=self.name,
            outputs=[
                NumpyCodec.encode_output("sums", sums),
                CSVCodec.encode_output("doubled", [[2 * v for v in row] for row in rows]),
            ],
        )
