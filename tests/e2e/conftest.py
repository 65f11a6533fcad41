"""Fixtures that build model repositories and start real servers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

from .serverproc import ServerProcess, start_server

RUNTIMES = Path(__file__).parent / "runtimes" / "testmodels.py"


def add_custom_model(repository: Path, folder: str, implementation: str, **settings: Any) -> Path:
    """A model folder holding the test runtimes and a model-settings.json."""
    path = repository / folder
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(RUNTIMES, path / "testmodels.py")
    body = {"name": folder.split("/")[0], "implementation": f"testmodels.{implementation}"}
    body.update(settings)
    (path / "model-settings.json").write_text(json.dumps(body))
    return path


def train_iris(path: Path) -> LogisticRegression:
    features, labels = load_iris(return_X_y=True)
    model = LogisticRegression(max_iter=500).fit(features, labels)
    joblib.dump(model, path)
    return model


def add_sklearn_model(
    repository: Path,
    name: str = "iris",
    implementation: str = "inferd.runtimes.sklearn.SKLearnModel",
) -> Path:
    path = repository / name
    path.mkdir(parents=True, exist_ok=True)
    train_iris(path / "model.joblib")
    settings = {
        "name": name,
        "implementation": implementation,
        "parameters": {"uri": "./model.joblib"},
    }
    (path / "model-settings.json").write_text(json.dumps(settings))
    return path


@pytest.fixture(scope="session")
def iris_features() -> np.ndarray:
    return load_iris(return_X_y=True)[0]


@pytest.fixture(scope="session")
def main_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository most tests share: sklearn, custom, versioned and failing models."""
    repository = tmp_path_factory.mktemp("repository")
    add_sklearn_model(repository)
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "double/v1", "AsyncDouble", parameters={"version": "1"})
    add_custom_model(repository, "double/v2", "AsyncDouble", parameters={"version": "2"})
    add_custom_model(repository, "fails", "FailsToPredict")
    return repository


@pytest.fixture(scope="session")
def server(main_repository: Path) -> Iterator[ServerProcess]:
    """One shared server (parallel_workers 0) on the main repository."""
    process = start_server(main_repository)
    yield process
    process.stop()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start extra servers for one test; all are stopped when it ends."""
    started: list[ServerProcess] = []

    def _start(repository: Path | None = None, **kwargs: Any) -> ServerProcess:
        process = start_server(repository or tmp_path, log_dir=tmp_path, **kwargs)
        started.append(process)
        return process

    yield _start
    for process in started:
        process.stop()
