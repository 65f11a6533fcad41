"""Train the bundled example model: a LogisticRegression on the iris data set.

Writes ``examples/models/sklearn-iris/model.joblib`` (git-ignored). The data set
ships with scikit-learn, so nothing is downloaded. Training is deterministic and
takes well under a second, so the model is rebuilt on every run: the artifact
always matches the installed scikit-learn. The file is replaced atomically, so a
server reading it never sees half a file.

    python examples/train_sklearn.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

MODEL_PATH = Path(__file__).resolve().parent / "models" / "sklearn-iris" / "model.joblib"


def train() -> LogisticRegression:
    features, labels = load_iris(return_X_y=True)
    return LogisticRegression(max_iter=1000).fit(features, labels)


def save(model: LogisticRegression, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(handle)
    try:
        joblib.dump(model, temporary)
        os.chmod(temporary, 0o644)  # mkstemp makes it owner-only; servers may run as another user
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


if __name__ == "__main__":
    save(train(), MODEL_PATH)
