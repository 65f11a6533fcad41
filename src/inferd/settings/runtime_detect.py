"""Which runtime serves a model, told from its files.

KServe describes its one model with environment variables, and names the runtime
through the InferenceService's ``modelClass`` label. For formats it does not map
(ONNX, or a ServingRuntime of its own such as inferd's) the label is empty or
falls back to MLServer's scikit-learn class. There the files decide: an
``MLmodel`` is MLflow, a ``*.onnx`` ONNX, and so on.

Only names are looked at (no file is opened), following symlinks, since KServe's
storage initializer and ModelMesh's adapter may link the artifacts in.
"""

from __future__ import annotations

from pathlib import Path

from inferd.settings.runtime_names import (
    CATBOOST,
    LIGHTGBM,
    MLFLOW,
    MLSERVER_SKLEARN,
    ONNX,
    SKLEARN,
    XGBOOST,
)

# What KServe puts in the modelClass label for formats it does not know.
SKLEARN_FALLBACKS = (MLSERVER_SKLEARN, SKLEARN)

# By suffix. ``.bst`` is XGBoost's and LightGBM's: KServe names either of them
# explicitly, so a ``.bst`` reaching detection is most likely XGBoost's.
_BY_SUFFIX = {
    ".joblib": SKLEARN,
    ".pkl": SKLEARN,
    ".pickle": SKLEARN,
    ".onnx": ONNX,
    ".ubj": XGBOOST,
    ".bst": XGBOOST,
    ".json": XGBOOST,
    ".txt": LIGHTGBM,
    ".cbm": CATBOOST,
}
# Files in a model folder that are never the model itself.
_NOT_ARTIFACTS = frozenset(
    {"model-settings.json", "settings.json", "requirements.txt", "conda.yaml", "README.md"}
)


def runtime_for_files(uri: Path) -> str | None:
    """The runtime class for the artifact at ``uri`` (a file or a folder); None when
    the files do not tell (nothing there, or several frameworks' files)."""
    if uri.is_file():
        return _BY_SUFFIX.get(uri.suffix.lower())
    if not uri.is_dir():
        return None
    if (uri / "MLmodel").is_file():
        return MLFLOW
    found = {
        _BY_SUFFIX[path.suffix.lower()]
        for path in uri.iterdir()
        if path.suffix.lower() in _BY_SUFFIX and path.name not in _NOT_ARTIFACTS and path.is_file()
    }
    return found.pop() if len(found) == 1 else None


def is_kserve_guess(implementation: str | None) -> bool:
    """Whether ``implementation`` is what KServe puts there without knowing: nothing
    (no modelClass label) or its scikit-learn fallback."""
    return implementation in ("", "<no value>", *SKLEARN_FALLBACKS)


def choose_runtime(implementation: str | None, uri: Path | None) -> str | None:
    """The runtime for a model KServe describes: ``implementation`` as given, unless it
    is missing or KServe's scikit-learn fallback and the files at ``uri`` say otherwise.

    An empty implementation is missing: KServe renders ``{{.Labels.modelClass}}`` as
    "" when the InferenceService has no such label."""
    if implementation in ("", "<no value>"):
        implementation = None
    if uri is None or (implementation is not None and implementation not in SKLEARN_FALLBACKS):
        return implementation
    detected = runtime_for_files(uri)
    if detected is None or (implementation is not None and detected == SKLEARN):
        return implementation
    return detected
