"""LightGBM boosters saved with ``Booster.save_model`` (MLServer's ``mlserver_lightgbm``).

``model-settings.json``::

    {"name": "fraud", "implementation": "inferd.runtimes.lightgbm.LightGBMModel",
     "parameters": {"uri": "./model.txt"}}

``uri`` names the model file, or a folder holding ``model.bst`` (MLServer's
name) or ``model.txt``. The one output, ``predict``, is what
``Booster.predict`` returns: values for a regressor, the positive class's
probability for a binary classifier (``[n, 1]``), one probability per class for
a multiclass one (``[n, classes]``). The input is one ``[n, features]`` array
or, with content type ``pd``, one input per column.
"""

from __future__ import annotations

import asyncio
from typing import Any

from inferd.errors import ModelNotReady
from inferd.model import Model
from inferd.runtimes import common
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata

# Well-known file names, else the one file with one of these suffixes.
FILES = (("model.bst", "model.txt"), (".bst", ".txt"))
PREDICT = "predict"


class LightGBMModel(Model):
    """Serves a LightGBM ``Booster``."""

    _booster: Any = None
    _n_features: int | None = None

    async def load(self) -> bool:
        lightgbm, path = await common.import_and_find(
            self, "lightgbm", "lightgbm", FILES, "LightGBM"
        )
        # Parsing a large model takes a while too: in a thread.
        self._booster = await asyncio.to_thread(lightgbm.Booster, model_file=str(path))
        self._n_features = int(self._booster.num_feature())
        return True

    # Plain def: nothing here awaits (see SKLearnModel.predict).
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if self._booster is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        common.requested_outputs(self, request, (PREDICT,), (PREDICT,))
        features = common.tabular_features(self, request, self._n_features)
        try:
            prediction = self._booster.predict(features)
        except ValueError as error:  # LightGBM's checks of DataFrame column types
            raise common.unusable_input(self, error) from error
        return common.response(self, request, [self.encode(PREDICT, prediction)])

    def metadata(self) -> ModelMetadata:
        metadata = super().metadata()
        if self._booster is None:
            return metadata
        # One column per class for multiclass objectives, else one.
        columns = int(self._booster.num_model_per_iteration())
        outputs = [MetadataTensor(PREDICT, "FP64", [-1, columns])]
        return common.with_derived_metadata(
            metadata, common.features_input(self._n_features, "FP64"), outputs
        )
