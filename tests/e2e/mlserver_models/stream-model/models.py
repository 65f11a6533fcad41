from collections.abc import AsyncIterator

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse


class StreamModel(MLModel):
    """Streams back each word of each text it is sent, one response per word."""

    async def predict_stream(
        self, payloads: AsyncIterator[InferenceRequest]
    ) -> AsyncIterator[InferenceResponse]:
        async for payload in payloads:
            for text in StringCodec.decode_input(payload.inputs[0]):
                for word in text.split():
                    yield InferenceResponse(
                        model_name=self.name,
                        outputs=[StringCodec.encode_output("word", [word])],
                    )
