from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.errors import MLServerError
from mlserver.types import InferenceRequest, InferenceResponse, Parameters


class TextModel(MLModel):
    """Upper-cases each text; an empty text is the client's error (400)."""

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        texts = StringCodec.decode_input(payload.inputs[0])
        if any(text == "" for text in texts):
            raise MLServerError("empty text is not allowed", status_code=400)
        upper = StringCodec.encode_output("upper", [text.upper() for text in texts])
        lengths = StringCodec.encode_output("lengths", [str(len(text)) for text in texts])
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            parameters=Parameters(content_type="str", seen=len(texts)),
            outputs=[upper, lengths],
        )
