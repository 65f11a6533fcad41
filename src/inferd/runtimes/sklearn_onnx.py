"""Opt-in ONNX Runtime acceleration for scikit-learn models.

``parameters.extra.accelerate: "onnx"`` on an :class:`SKLearnModel` converts
the fitted estimator with skl2onnx at load, runs both on a sample, and serves
``predict`` (and ``predict_proba``) through ONNX Runtime only when they agree:
the same labels from the same classes, probabilities and values within
:data:`TOLERANCE`. When the conversion or the check fails (no converter for a
step, a package missing, a mismatch) the model is served by scikit-learn and
a warning says why: acceleration never stops a model from loading.

Only what ONNX Runtime answers exactly as scikit-learn would goes through it:
a request whose features are not one finite numeric array (a DataFrame, NaN,
text) or that asks for another method (``transform``, ``decision_function``)
is answered by scikit-learn, so its answers and errors do not change. Results
keep scikit-learn's dtypes (labels as ``classes_``, probabilities and values
as float64), so clients see the same datatypes with or without acceleration.
``parameters.extra.intra_op_threads`` sets ONNX Runtime's threads per call
(default 1).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from inferd.runtimes.common import NUMERIC_KINDS, import_framework, short_error

logger = logging.getLogger(__name__)

ACCELERATE_KEY = "accelerate"
ONNX = "onnx"
PREDICT = "predict"
PREDICT_PROBA = "predict_proba"
INPUT_NAME = "X"
SAMPLE_ROWS = 200
TOLERANCE = 1e-3
"""Relative (and, scaled to the values' size, absolute) difference allowed between
ONNX Runtime's float32 results and scikit-learn's float64 ones."""
DEFAULT_THREADS = 1
"""Threads per call: the models this helps are small, and a server runs many calls
at once; a thread pool per call costs more than it saves (measured ~3x slower)."""


class OnnxAccelerator:
    """An estimator's ``predict`` / ``predict_proba`` run by ONNX Runtime."""

    def __init__(self, session: Any, outputs: dict[str, str], classes: np.ndarray | None):
        self._session = session
        self._outputs = outputs  # method -> graph output name
        self._classes = classes

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self._outputs)

    def run(self, methods: tuple[str, ...], features: Any) -> dict[str, np.ndarray]:
        """The results of the ``methods`` it serves, by method, from one session run;
        none when scikit-learn must answer these features."""
        served = [method for method in methods if method in self._outputs]
        if not served or not _plain_numbers(features):
            return {}
        inputs = features.astype(np.float32, copy=False)
        if not np.isfinite(inputs).all():  # NaN, or too large for float32
            return {}
        names = [self._outputs[method] for method in served]
        results = self._session.run(names, {INPUT_NAME: inputs})
        return {
            method: self._as_sklearn(method, result)
            for method, result in zip(served, results, strict=True)
        }

    def _as_sklearn(self, method: str, result: np.ndarray) -> np.ndarray:
        if method == PREDICT and self._classes is not None:
            return result.astype(self._classes.dtype, copy=False)
        if method == PREDICT and result.ndim == 2 and result.shape[1] == 1:
            result = result[:, 0]  # a single-target regressor predicts [n], as in scikit-learn
        return result.astype(np.float64)


def _plain_numbers(features: Any) -> bool:
    return (
        isinstance(features, np.ndarray)
        and features.ndim == 2
        and features.dtype.kind in NUMERIC_KINDS
    )


def accelerate(estimator: Any, model_name: str, threads: int | None) -> OnnxAccelerator | None:
    """An accelerator that agrees with ``estimator`` on a sample, or None (with a warning)."""
    try:
        accelerator = _convert(estimator, DEFAULT_THREADS if threads is None else threads)
        _check_agreement(accelerator, estimator)
    except Exception as error:  # skl2onnx fails in many ways; each means: stay on sklearn
        logger.warning(
            "Model %r: accelerate 'onnx' is off, scikit-learn serves the model: %s: %s",
            model_name,
            type(error).__name__,
            short_error(error),
        )
        return None
    logger.info(
        "Model %r: %s served by ONNX Runtime", model_name, " and ".join(accelerator.methods)
    )
    return accelerator


def _convert(estimator: Any, threads: int) -> OnnxAccelerator:
    from sklearn.base import is_classifier, is_regressor

    skl2onnx = import_framework("skl2onnx", "accelerate 'onnx'", "sklearn-onnx")
    ort = import_framework("onnxruntime", "accelerate 'onnx'", "sklearn-onnx")
    data_types = import_framework("skl2onnx.common.data_types", "accelerate 'onnx'", "sklearn-onnx")
    count = getattr(estimator, "n_features_in_", None)
    if count is None or hasattr(estimator, "feature_names_in_"):
        raise ValueError("only estimators fit on a numeric array (not a DataFrame) are converted")
    if not (is_classifier(estimator) or is_regressor(estimator)):
        raise ValueError("only classifiers and regressors are converted")
    initial_types = [(INPUT_NAME, data_types.FloatTensorType([None, int(count)]))]
    onnx_model = skl2onnx.to_onnx(
        estimator, initial_types=initial_types, options=_options(estimator)
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = threads
    session = ort.InferenceSession(
        onnx_model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]
    if is_regressor(estimator):
        return OnnxAccelerator(session, {PREDICT: names[0]}, None)
    outputs = {PREDICT: names[0]}
    if hasattr(estimator, PREDICT_PROBA):
        outputs[PREDICT_PROBA] = names[1]
    return OnnxAccelerator(session, outputs, np.asarray(estimator.classes_))


def _options(estimator: Any) -> dict[int, dict[str, Any]] | None:
    """Probabilities as one tensor rather than a list of dicts (skl2onnx's ZipMap),
    for the final classifier; only classifiers with probabilities know the option."""
    final = estimator[-1] if hasattr(estimator, "steps") else estimator
    if hasattr(final, PREDICT_PROBA) and hasattr(final, "classes_"):
        return {id(final): {"zipmap": False}}
    return None


def _check_agreement(accelerator: OnnxAccelerator, estimator: Any) -> None:
    """Raise unless ONNX Runtime answers the sample as scikit-learn does."""
    sample = _sample(int(estimator.n_features_in_))
    results = accelerator.run(accelerator.methods, sample)
    for method in accelerator.methods:
        expected = np.asarray(getattr(estimator, method)(sample))
        actual = results[method]
        if actual.shape != expected.shape:
            raise ValueError(
                f"{method} gives shape {list(actual.shape)}, scikit-learn {list(expected.shape)}"
            )
        if method == PREDICT and expected.dtype.kind not in "fc":
            mismatched = int(np.count_nonzero(actual != expected))
            if mismatched:
                raise ValueError(f"{method} differs from scikit-learn on {mismatched} sample rows")
            continue
        scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
        if not np.allclose(actual, expected, rtol=TOLERANCE, atol=TOLERANCE * scale):
            difference = float(np.abs(actual - expected).max())
            raise ValueError(f"{method} differs from scikit-learn by up to {difference:.3g}")


def _sample(count: int) -> np.ndarray:
    """Rows at several scales, so the check crosses thresholds and saturations.

    Drawn, not taken from training data (which the artifact does not keep);
    float32-exact so both runtimes see the very same numbers.
    """
    rng = np.random.default_rng(0)
    scales = np.repeat([0.1, 1.0, 10.0, 100.0], SAMPLE_ROWS // 4)[:, None]
    return (
        (rng.standard_normal((SAMPLE_ROWS, count)) * scales).astype(np.float32).astype(np.float64)
    )
