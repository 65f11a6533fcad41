"""Model folders and the iris model, written one way for every test tier and the benchmarks
(tests/support/models.py adds the folders that serve the tests' own runtimes).

- ``write_model_folder``: ``repository/folder`` with its model-settings.json and the
  files beside it (a runtime module, a model file). The only code in the tests and
  benchmarks that writes a model folder; a test writing a broken one on purpose writes it
  itself.
- ``train_iris`` / ``add_sklearn_model``: scikit-learn's LogisticRegression on iris,
  saved with joblib, and a folder that serves it.
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

MODEL_SETTINGS = "model-settings.json"
SKLEARN = "inferd.runtimes.sklearn.SKLearnModel"
IRIS_FILE = "model.joblib"

# What a model folder holds besides its settings: a file to copy, or text/bytes to write.
Content = Path | str | bytes


def write_model_folder(
    repository: Path,
    folder: str,
    implementation: str | None = None,
    *,
    files: Mapping[str, Content] | None = None,
    **settings: Any,
) -> Path:
    """``repository/folder`` (a version folder, e.g. ``double/v1``, is fine) holding
    ``files`` and a model-settings.json of ``name`` (the folder's first part unless
    given), ``implementation`` and ``settings``; a setting given as None is left out."""
    path = repository / folder
    path.mkdir(parents=True, exist_ok=True)
    for name, content in (files or {}).items():
        _write(path / name, content)
    body = {"name": folder.split("/")[0], "implementation": implementation, **settings}
    present = {key: value for key, value in body.items() if value is not None}
    (path / MODEL_SETTINGS).write_text(json.dumps(present))
    return path


def _write(target: Path, content: Content) -> None:
    if isinstance(content, Path):
        shutil.copy(content, target)
    elif isinstance(content, str):
        target.write_text(content)
    else:
        target.write_bytes(content)


@functools.cache
def _fitted_iris() -> LogisticRegression:
    features, labels = load_iris(return_X_y=True)
    return LogisticRegression(max_iter=1000).fit(features, labels)


def train_iris(path: Path | None = None) -> LogisticRegression:
    """LogisticRegression fitted on iris (4 features, 3 classes; fitted once per process),
    saved with joblib at ``path`` when given."""
    model = _fitted_iris()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        joblib.dump(model, path)
    return model


def add_sklearn_model(
    repository: Path,
    name: str = "iris",
    implementation: str = SKLEARN,
    parameters: Mapping[str, Any] | None = None,
    **settings: Any,
) -> Path:
    """A folder serving the iris model (``model.joblib``) with ``implementation``;
    ``parameters`` are added to its ``uri``."""
    parameters = {"uri": f"./{IRIS_FILE}", **(parameters or {})}
    folder = write_model_folder(repository, name, implementation, parameters=parameters, **settings)
    train_iris(folder / IRIS_FILE)
    return folder
