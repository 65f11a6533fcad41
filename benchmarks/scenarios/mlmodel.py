"""An MLServer custom runtime (an ``MLModel`` subclass) on inferd vs on MLServer."""

from __future__ import annotations

from pathlib import Path

import joblib

from benchmarks.common.models import write_model_folder

from ..repository import MODEL_FILE
from ..servers import Contender
from .base import Case
from .rest import Rest

# Written as MLServer's docs write a custom runtime: it imports mlserver, never inferd.
IRIS_RUNTIME = """\
import joblib
import numpy as np

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class IrisModel(MLModel):
    async def load(self) -> bool:
        self._model = joblib.load(await get_model_uri(self.settings))
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        features = self.decode(payload.inputs[0], default_codec=NumpyCodec)
        classes = self._model.predict(features)
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[NumpyCodec.encode_output("predict", classes)],
        )
"""


class MLModelIris(Rest):
    name = "mlmodel"
    description = """An MLServer custom runtime, unchanged, on inferd vs on MLServer.

The iris LogisticRegression served by an MLServer-style ``MLModel`` (models.py
importing mlserver: decode with NumpyCodec, predict, encode) from the same folder
on both servers, one FP32 row per POST, parallel_workers 1. On inferd the
``mlserver`` names resolve to inferd's compatibility package and each request is
converted to MLServer's pydantic types and back."""
    defaults = {"parallel_workers": 1}

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        files, parameters = {"models.py": IRIS_RUNTIME}, {"uri": f"./{MODEL_FILE}"}
        folder = write_model_folder(
            repo, self.model, "models.IrisModel", files=files, parameters=parameters
        )
        joblib.dump(self.estimator, folder / MODEL_FILE)
