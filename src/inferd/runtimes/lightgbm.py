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

from inferd.errors import InvalidRequest, ModelNotReady
from inferd.model import Model
from inferd.runtimes.common import (
    features_input,
    find_model_file,
    import_framework,
    requested_outputs,
    response,
    short_error,
    tabular_features,
    with_derived_metadata,
)
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata

WELL_KNOWN_FILENAMES = ("model.bst", "model.txt")
SUFFIXES = (".bst", ".txt")
PREDICT = "predict"


class LightGBMModel(Model):
    """Serves a LightGBM ``Booster``."""

    _booster: Any = None
    _n_features: int | None = None

    async def load(self) -> bool:
        # Importing the framework and parsing a large model take a while: in a thread,
        # so the event loop keeps answering. The install hint comes before file errors.
        lightgbm = await asyncio.to_thread(
            import_framework, "lightgbm", type(self).__name__, "lightgbm"
        )
        path = find_model_file(self.settings.uri, WELL_KNOWN_FILENAMES, SUFFIXES, "LightGBM")
        self._booster = await asyncio.to_thread(lightgbm.Booster, model_file=str(path))
        self._n_features = int(self._booster.num_feature())
        return True

    # Plain def: nothing here awaits (see SKLearnModel.predict).
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if self._booster is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        requested_outputs(self, request, (PREDICT,), (PREDICT,))
        features = tabular_features(self, request, self._n_features)
        try:
            prediction = self._booster.predict(features)
        except ValueError as error:  # LightGBM's checks of DataFrame column types
            raise InvalidRequest(
                f"Model {self.name!r} cannot use the request's input: {short_error(error)}"
            ) from error
        return response(self, request, [self.encode(PREDICT, prediction)])

    def metadata(self) -> ModelMetadata:
        metadata = super().metadata()
        if self._booster is None:
            return metadata
        # One column per class for multiclass objectives, else one.
        columns = int(self._booster.num_model_per_iteration())
        outputs = [MetadataTensor(PREDICT, "FP64", [-1, columns])]
        return with_derived_metadata(metadata, features_input(self._n_features, "FP64"), outputs)
