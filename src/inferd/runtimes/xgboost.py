"""XGBoost models saved with ``save_model`` (MLServer's ``mlserver_xgboost``).

``model-settings.json``::

    {"name": "churn", "implementation": "inferd.runtimes.xgboost.XGBoostModel",
     "parameters": {"uri": "./model.json"}}

``uri`` names the model file, or a folder holding ``model.bst``, ``model.json``
or ``model.ubj`` (MLServer's names). Whether the model is a classifier is read
from its objective (``binary:*``, ``multi:*``), so a model saved from the native
``Booster`` API is served like one saved from ``XGBClassifier``.

Outputs are ``predict`` (class labels, or values for a regressor) and, for a
classifier, ``predict_proba``; a request that names no outputs gets
``predict``, as in MLServer. The input is one ``[n, features]`` array or, with
content type ``pd``, one input per column (checked against the model's
feature names by XGBoost).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from inferd.errors import ModelNotReady
from inferd.model import Model
from inferd.runtimes import common
from inferd.tensors.datatypes import datatype_of
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata

# Well-known file names, else the one file with one of these suffixes.
FILES = (("model.bst", "model.json", "model.ubj"), (".bst", ".json", ".ubj"))
CLASSIFIER_OBJECTIVES = ("binary:", "multi:")
PREDICT = "predict"
PREDICT_PROBA = "predict_proba"


class XGBoostModel(Model):
    """Serves an XGBoost classifier or regressor through its scikit-learn interface."""

    _estimator: Any = None
    _is_classifier = False
    _n_features: int | None = None
    _n_targets = 1

    async def load(self) -> bool:
        xgb, path = await common.import_and_find(self, "xgboost", "xgboost", FILES, "XGBoost")
        # Parsing a large model takes a while too: in a thread.
        await asyncio.to_thread(self._read, xgb, path)
        return True

    def _read(self, xgb: Any, path: Path) -> None:
        # The objective (and so the estimator class) is only known once the file is
        # read; the scikit-learn wrapper then reads it again into the right class.
        config = json.loads(xgb.Booster(model_file=str(path)).save_config())
        learner = config["learner"]
        self._is_classifier = learner["objective"]["name"].startswith(CLASSIFIER_OBJECTIVES)
        self._n_targets = int(learner["learner_model_param"].get("num_target", 1))
        estimator = xgb.XGBClassifier() if self._is_classifier else xgb.XGBRegressor()
        estimator.load_model(str(path))
        if self.context.device:
            estimator.set_params(device=self.context.device)
        self._n_features = estimator.get_booster().num_features()
        self._estimator = estimator

    @property
    def _offered_outputs(self) -> tuple[str, ...]:
        return (PREDICT, PREDICT_PROBA) if self._is_classifier else (PREDICT,)

    # Plain def: nothing here awaits (see SKLearnModel.predict).
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if self._estimator is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        methods = common.requested_outputs(self, request, self._offered_outputs, (PREDICT,))
        features = common.tabular_features(self, request, self._n_features)
        outputs = [self.encode(method, self._call(method, features)) for method in methods]
        return common.response(self, request, outputs)

    def _call(self, method: str, features: Any) -> Any:
        try:
            return getattr(self._estimator, method)(features)
        except ValueError as error:  # XGBoost's checks of column names and types
            raise common.unusable_input(self, error) from error

    def metadata(self) -> ModelMetadata:
        metadata = super().metadata()
        if self._estimator is None:
            return metadata
        return common.with_derived_metadata(
            metadata, common.features_input(self._n_features, "FP32"), self._derived_outputs()
        )

    def _derived_outputs(self) -> list[MetadataTensor]:
        if not self._is_classifier:
            return [MetadataTensor(PREDICT, "FP32", [-1, self._n_targets])]
        classes = self._estimator.classes_
        return [
            MetadataTensor(PREDICT, datatype_of(classes.dtype), [-1, 1]),
            MetadataTensor(PREDICT_PROBA, "FP32", [-1, len(classes)]),
        ]
