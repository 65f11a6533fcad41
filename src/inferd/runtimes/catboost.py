"""CatBoost models saved with ``save_model`` (MLServer's ``mlserver_catboost``).

``model-settings.json``::

    {"name": "churn", "implementation": "inferd.runtimes.catboost.CatBoostModel",
     "parameters": {"uri": "./model.cbm"}}

``uri`` names the model file, or a folder holding ``model.cbm`` or
``model.bin`` (MLServer's names). A model that knows its classes is a
classifier: its outputs are ``predict`` (the class labels, text labels as
``str``) and ``predict_proba``; a regressor has ``predict`` only. A request that
names no outputs gets ``predict``, as in MLServer. The input is one
``[n, features]`` array or, with content type ``pd``, one input per column
(the way to send a model's categorical features).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inferd.errors import ModelNotReady
from inferd.model import Model
from inferd.runtimes import common
from inferd.tensors.datatypes import datatype_of
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata

# Well-known file names, else the one file with one of these suffixes.
FILES = (("model.cbm", "model.bin"), (".cbm", ".bin"))
PREDICT = "predict"
PREDICT_PROBA = "predict_proba"

# What CatBoostClassifier.predict / predict_proba ask of the model.
CLASSIFIER_PREDICTION_TYPES = {PREDICT: "Class", PREDICT_PROBA: "Probability"}


def regression_prediction_type(loss_function: str) -> str:
    """What CatBoostRegressor.predict asks of a model trained with ``loss_function``:
    Poisson and Tweedie models predict on the exponent scale."""
    if loss_function.startswith(("Poisson", "Tweedie")):
        return "Exponent"
    if loss_function == "RMSEWithUncertainty":
        return "RMSEWithUncertainty"
    return "RawFormulaVal"


def _read(catboost: Any, path: Path) -> Any:
    model = catboost.CatBoost()
    model.load_model(str(path))
    return model


class CatBoostModel(Model):
    """Serves a CatBoost classifier or regressor."""

    _model: Any = None
    _prediction_types: dict[str, str] = {}
    _error_type: type[Exception] = Exception

    async def load(self) -> bool:
        catboost, path = await common.import_and_find(
            self, "catboost", "catboost", FILES, "CatBoost"
        )
        self._error_type = catboost.CatBoostError
        # Parsing a large model takes a while too: in a thread.
        self._model = await asyncio.to_thread(_read, catboost, path)
        # The generic CatBoost class reads any model once; predicting with the
        # prediction types the Classifier/Regressor classes use gives their answers.
        if self._is_classifier:
            self._prediction_types = CLASSIFIER_PREDICTION_TYPES
        else:
            loss = str(self._model.get_all_params().get("loss_function", ""))
            self._prediction_types = {PREDICT: regression_prediction_type(loss)}
        return True

    @property
    def _is_classifier(self) -> bool:
        return len(self._model.classes_) > 0

    @property
    def _n_features(self) -> int:
        return len(self._model.feature_names_)

    # Plain def: nothing here awaits (see SKLearnModel.predict).
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if self._model is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        methods = common.requested_outputs(self, request, tuple(self._prediction_types), (PREDICT,))
        features = common.tabular_features(self, request, self._n_features)
        outputs = [self.encode(method, self._call(method, features)) for method in methods]
        return common.response(self, request, outputs)

    def _call(self, method: str, features: Any) -> Any:
        try:
            return self._model.predict(features, prediction_type=self._prediction_types[method])
        except self._error_type as error:  # CatBoostError: e.g. text in a numeric feature
            raise common.unusable_input(self, error) from error

    def metadata(self) -> ModelMetadata:
        metadata = super().metadata()
        if self._model is None:
            return metadata
        # Categorical features take text, so one numeric matrix cannot describe them.
        numeric = not self._model.get_cat_feature_indices()
        inputs = common.features_input(self._n_features, "FP32") if numeric else []
        return common.with_derived_metadata(metadata, inputs, self._derived_outputs())

    def _regression_columns(self) -> int:
        """Columns of a regressor's ``predict``; -1 where the loss does not say."""
        loss = str(self._model.get_all_params().get("loss_function", ""))
        if loss == "RMSEWithUncertainty":
            return 2  # the mean and the variance
        return -1 if loss.startswith("Multi") else 1

    def _derived_outputs(self) -> list[MetadataTensor]:
        if not self._is_classifier:
            return [MetadataTensor(PREDICT, "FP64", [-1, self._regression_columns()])]
        classes = self._model.classes_
        is_text = classes.size > 0 and isinstance(classes[0], str)
        parameters = {"content_type": "str"} if is_text else {}
        return [
            MetadataTensor(PREDICT, datatype_of(classes.dtype), [-1, 1], parameters),
            MetadataTensor(PREDICT_PROBA, "FP64", [-1, len(classes)]),
        ]
