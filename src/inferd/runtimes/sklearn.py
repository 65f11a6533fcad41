"""scikit-learn models saved with joblib or pickle (MLServer's ``mlserver_sklearn``).

``model-settings.json``::

    {"name": "iris", "implementation": "inferd.runtimes.sklearn.SKLearnModel",
     "parameters": {"uri": "./model.joblib", "extra": {"predict_fn": "predict_proba"}}}

A request names the methods it wants as its outputs (``predict``,
``predict_proba``, ``transform``); without outputs the model answers with
``parameters.extra.predict_fn`` (default ``predict``). Each output is named
after its method and keeps rows on the first axis: a 1-D result of n rows is
sent as ``[n, 1]``, as MLServer does. The input is one ``[n, features]`` array,
or, with content type ``pd``, one input per DataFrame column.

``parameters.extra.accelerate: "onnx"`` serves ``predict`` and ``predict_proba``
through ONNX Runtime when a check at load shows it answers as scikit-learn
does (see :mod:`inferd.runtimes.sklearn_onnx`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from inferd.errors import InvalidRequest, ModelNotReady
from inferd.model import Model
from inferd.runtimes.common import DERIVED_INPUT_NAME
from inferd.runtimes.sklearn_onnx import ACCELERATE_KEY, ONNX, OnnxAccelerator, accelerate
from inferd.tensors import codecs
from inferd.tensors.datatypes import datatype_of
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, ModelMetadata, Tensor

WELL_KNOWN_FILENAMES = ("model.joblib", "model.pickle", "model.pkl")
"""Artifact names looked for when ``uri`` is a folder, in MLServer's order."""

PREDICT = "predict"
PREDICT_PROBA = "predict_proba"
TRANSFORM = "transform"
VALID_OUTPUTS = (PREDICT, PREDICT_PROBA, TRANSFORM)
PREDICT_FN_KEY = "predict_fn"


def find_artifact(uri: Path) -> Path:
    """The model file at ``uri``, or the first well-known model file in that folder."""
    if uri.is_file():
        return uri
    if uri.is_dir():
        for filename in WELL_KNOWN_FILENAMES:
            if (uri / filename).is_file():
                return uri / filename
        raise FileNotFoundError(
            f"No scikit-learn model in folder {uri}: looked for "
            f"{', '.join(WELL_KNOWN_FILENAMES)}; save the model under one of these names "
            "or point parameters.uri at the file"
        )
    raise FileNotFoundError(
        f"No scikit-learn model at {uri}: the path does not exist; set parameters.uri "
        "in model-settings.json to the model file or its folder"
    )


def _import_joblib() -> Any:
    # joblib.load unpickles sklearn classes, so both must be installed.
    try:
        import joblib
        import sklearn  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"SKLearnModel needs scikit-learn and joblib ({error}); "
            "install them with: pip install inferd[sklearn]"
        ) from error
    return joblib


class SKLearnModel(Model):
    """Serves a scikit-learn estimator or pipeline."""

    _estimator: Any = None
    _default_methods: tuple[str, ...] = (PREDICT,)
    _offered_outputs: tuple[str, ...] = ()
    _accelerator: OnnxAccelerator | None = None

    async def load(self) -> bool:
        path = find_artifact(self.settings.uri)
        joblib = _import_joblib()
        # Unpickling a large model takes a while; keep the event loop answering.
        self._estimator = await asyncio.to_thread(joblib.load, path)
        self._default_methods = (self._configured_method(),)
        # Worked out once: hasattr on a Pipeline runs its available_if checks.
        self._offered_outputs = tuple(
            dict.fromkeys([*self._supported_outputs(), *self._default_methods])
        )
        if self._accelerate_with_onnx():
            # Conversion and its check run the model: keep the event loop answering.
            self._accelerator = await asyncio.to_thread(
                accelerate, self._estimator, self.name, self.settings.extra.get("intra_op_threads")
            )
        return True

    def _accelerate_with_onnx(self) -> bool:
        accelerator = self.settings.extra.get(ACCELERATE_KEY)
        if accelerator not in (None, ONNX):
            raise ValueError(
                f"Model {self.name!r}: parameters.extra.{ACCELERATE_KEY} is {accelerator!r}; "
                f"the one accelerator is {ONNX!r} (or leave it out)"
            )
        return accelerator == ONNX

    def _configured_method(self) -> str:
        """``parameters.extra.predict_fn``, checked against the estimator at load time.

        Any public method is accepted (as MLServer does), e.g. ``decision_function``.
        Unset, it is ``predict``, or for a pure transformer its first method
        (``transform``), so such a model answers requests that name no outputs.
        """
        method = self.settings.extra.get(PREDICT_FN_KEY)
        if method is None:
            supported = self._supported_outputs()
            return PREDICT if PREDICT in supported or not supported else supported[0]
        if (
            not isinstance(method, str)
            or method.startswith("_")
            or not callable(getattr(self._estimator, method, None))
        ):
            raise ValueError(
                f"Model {self.name!r}: parameters.extra.{PREDICT_FN_KEY} is {method!r}, which "
                f"is not a method of {type(self._estimator).__name__}; use one of "
                f"{', '.join(self._supported_outputs())}"
            )
        return method

    def _supported_outputs(self) -> list[str]:
        return [name for name in VALID_OUTPUTS if hasattr(self._estimator, name)]

    # A plain function on purpose: it awaits nothing, so a coroutine would only add
    # overhead; the caller runs it on the event loop or in a worker as it sees fit.
    def predict(self, request: InferenceRequest) -> InferenceResponse:
        if self._estimator is None:
            raise ModelNotReady(f"Model {self.name!r} is not loaded")
        methods = self._methods(request)
        features = self._features(request)
        # All accelerated methods in one ONNX Runtime call; the others by scikit-learn.
        accelerated = self._accelerator.run(methods, features) if self._accelerator else {}
        outputs: list[Tensor] = []
        for method in methods:
            result = accelerated.get(method)
            if result is None:
                result = _dense(self._call(method, features))
            if codecs.is_dataframe(result):
                outputs.extend(self._dataframe_outputs(method, result, methods))
            else:
                outputs.append(self.encode(method, result))
        return InferenceResponse(
            outputs=outputs, model_name=self.name, model_version=self.version, id=request.id
        )

    def _methods(self, request: InferenceRequest) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(request.output_names))  # dict: dedupe, keep order
        if not names:
            return self._default_methods
        for name in names:
            if name not in self._offered_outputs:
                raise InvalidRequest(
                    f"Model {self.name!r} has no output {name!r}; "
                    f"{type(self._estimator).__name__} offers {', '.join(self._offered_outputs)}"
                )
        return names

    def _features(self, request: InferenceRequest) -> Any:
        content_type = request.content_type or self._default_content_type
        if content_type != codecs.PANDAS and len(request.inputs) != 1:
            names = ", ".join(repr(tensor.name) for tensor in request.inputs) or "none"
            raise InvalidRequest(
                f"Model {self.name!r} takes one input{self._expected_shape()}, got "
                f"{len(request.inputs)} ({names}); to send one input per column, set the "
                "request's parameters.content_type to 'pd'"
            )
        features = self.decode_request(request)
        self._check_feature_count(request, features)
        return features

    def _expected_shape(self) -> str:
        count = getattr(self._estimator, "n_features_in_", None)
        return f" of shape [-1, {count}]" if count is not None else ""

    def _check_feature_count(self, request: InferenceRequest, features: Any) -> None:
        """Refuse inputs of the wrong width before the estimator sees them, with the
        shape the model expects (sklearn's own message does not say it)."""
        count = getattr(self._estimator, "n_features_in_", None)
        if count is None:
            return
        if codecs.is_dataframe(features):
            if len(features.columns) != count:
                raise InvalidRequest(
                    f"Model {self.name!r} expects {count} columns{self._feature_names()}, "
                    f"got {len(features.columns)}: {', '.join(map(str, features.columns))}"
                )
        elif isinstance(features, np.ndarray) and (
            features.ndim != 2 or features.shape[1] != count
        ):
            raise InvalidRequest(
                f"Input {request.inputs[0].name!r} has shape {list(features.shape)}, but "
                f"model {self.name!r} expects shape [-1, {count}] ({count} features per row)"
            )

    def _feature_names(self) -> str:
        names = getattr(self._estimator, "feature_names_in_", None)
        return f" ({', '.join(map(str, names))})" if names is not None else ""

    def _call(self, method: str, features: Any) -> Any:
        try:
            return getattr(self._estimator, method)(features)
        except ValueError as error:
            if not _raised_by_input_validation(error.__traceback__):
                raise  # a failure of the model itself: the client sees it as a 500
            raise InvalidRequest(
                f"Model {self.name!r} cannot use the request's input{self._expected_shape()}: "
                f"{error}"
            ) from error

    def _dataframe_outputs(self, method: str, frame: Any, methods: tuple[str, ...]) -> list[Tensor]:
        # A DataFrame (e.g. from set_output(transform="pandas")) becomes one output
        # per column, as in MLServer; their names would clash with other methods'.
        if len(methods) > 1:
            raise InvalidRequest(
                f"Model {self.name!r}: {method} returns a table whose columns become the "
                f"outputs; request it alone (outputs: [{method!r}])"
            )
        return codecs.encode_outputs(frame)

    def metadata(self) -> ModelMetadata:
        """Declared inputs/outputs from the settings; what is not declared is derived
        from the estimator once loaded."""
        metadata = super().metadata()
        if self._estimator is not None:
            metadata.inputs = metadata.inputs or self._derived_inputs()
            metadata.outputs = metadata.outputs or self._derived_outputs()
        return metadata

    def _derived_inputs(self) -> list[MetadataTensor]:
        # An estimator fit on a DataFrame takes named columns whose datatypes it
        # does not record, so nothing truthful can be said about them.
        count = getattr(self._estimator, "n_features_in_", None)
        if count is None or hasattr(self._estimator, "feature_names_in_"):
            return []
        return [MetadataTensor(DERIVED_INPUT_NAME, "FP64", [-1, int(count)])]

    def _derived_outputs(self) -> list[MetadataTensor]:
        from sklearn.base import is_classifier, is_regressor

        estimator = self._estimator
        classes = getattr(estimator, "classes_", None)
        outputs = []
        if is_classifier(estimator) and isinstance(classes, np.ndarray) and classes.ndim == 1:
            outputs.append(_classes_output(classes))
            if hasattr(estimator, PREDICT_PROBA):
                outputs.append(MetadataTensor(PREDICT_PROBA, "FP64", [-1, len(classes)]))
        elif is_regressor(estimator):
            # [-1, -1]: one column per target, and the number of targets is not recorded.
            outputs.append(MetadataTensor(PREDICT, "FP64", [-1, -1]))
        return outputs


def _classes_output(classes: np.ndarray) -> MetadataTensor:
    datatype = datatype_of(classes.dtype)
    # Text labels are sent as BYTES tagged str (see codecs.encode_tensor).
    is_text = classes.size > 0 and isinstance(classes[0], str)
    parameters = {"content_type": codecs.STRING} if is_text else {}
    return MetadataTensor(PREDICT, datatype, [-1, 1], parameters)


def _dense(result: Any) -> Any:
    """scipy sparse results (e.g. OneHotEncoder.transform) as dense arrays."""
    return result.toarray() if hasattr(result, "toarray") else result


def _raised_by_input_validation(traceback: TracebackType | None) -> bool:
    """Whether sklearn's input validation raised: then the request is at fault
    (wrong width, NaN, text where numbers belong, unknown column names)."""
    while traceback is not None:
        if traceback.tb_frame.f_globals.get("__name__") == "sklearn.utils.validation":
            return True
        traceback = traceback.tb_next
    return False
