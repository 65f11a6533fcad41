import pandas as pd
from mlserver import MLModel
from mlserver.codecs import NumpyRequestCodec, PandasCodec
from mlserver.types import InferenceRequest, InferenceResponse


class PandasModel(MLModel):
    """Reads a DataFrame (a, b, name) and answers a + b as one numpy output."""

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        frame = self.decode_request(payload, default_codec=PandasCodec)
        assert isinstance(frame, pd.DataFrame)
        total = (frame["a"] + frame["b"]).to_numpy()
        return NumpyRequestCodec.encode_response(self.name, total, self.version)
