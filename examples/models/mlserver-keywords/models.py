"""An MLServer 1.7 custom runtime, written exactly as for MLServer: inferd serves it
unchanged (no `inferd` import; `mlserver` resolves to inferd's compatibility package
when MLServer is not installed)."""

from typing import List  # noqa: UP035 - MLServer matches codecs on typing.List[str]

import mlserver
import numpy as np
from mlserver import MLModel
from mlserver.codecs import decode_args
from mlserver.errors import MLServerError
from mlserver.handlers import custom_handler


class KeywordModel(MLModel):
    """Counts, in each text, the keywords listed in model-settings.json."""

    async def load(self) -> bool:
        self.keywords = set(self.settings.parameters.extra["keywords"])
        mlserver.register("keyword_hits", "Keywords found per request")
        return True

    @decode_args
    async def predict(self, text: List[str]) -> np.ndarray:  # noqa: UP006
        if not text:
            raise MLServerError("send at least one text", status_code=400)
        hits = [sum(word in self.keywords for word in item.lower().split()) for item in text]
        mlserver.log(keyword_hits=sum(hits))
        return np.array(hits, dtype=np.int64)

    @custom_handler(rest_path="/keywords", rest_method="GET")
    async def list_keywords(self) -> dict:
        return {"keywords": sorted(self.keywords)}
