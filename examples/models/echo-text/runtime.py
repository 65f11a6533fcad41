"""A custom runtime: per-row word counts and upper-cased text.

Shows the content types a custom model uses: the BYTES input ``text`` is read
as a list of ``str`` (whatever content type the client set, ``str`` is the
default here), and the outputs are built from plain Python values: an INT64
array of counts and a list of ``str`` sent as BYTES tagged ``str``.

    curl -s localhost:8080/v2/models/echo-text/infer -d '{"inputs": [{"name": "text",
      "datatype": "BYTES", "shape": [2, 1], "data": ["hello world", "inferd"]}]}'
"""

from __future__ import annotations

import numpy as np

from inferd.errors import InvalidRequest
from inferd.model import Model
from inferd.types import InferenceRequest, InferenceResponse


class TextStats(Model):
    async def load(self) -> bool:
        return True  # nothing to read: the model is the code below

    async def predict(self, request: InferenceRequest) -> InferenceResponse:
        try:
            tensor = request.input("text")
        except KeyError:
            raise InvalidRequest("Model 'echo-text' needs a BYTES input named 'text'") from None
        texts: list[str] = self.decode(tensor, default_content_type="str")
        word_counts = np.array([len(text.split()) for text in texts], dtype=np.int64)
        upper = [text.upper() for text in texts]
        return InferenceResponse(
            outputs=[self.encode("word_count", word_counts), self.encode("upper", upper, "str")],
            model_name=self.name,
            model_version=self.version,
            id=request.id,
        )
