"""The MLServer-style model folders under mlserver_models/, copied into a repository."""

from __future__ import annotations

import shutil
from pathlib import Path

FOLDERS = Path(__file__).parent / "mlserver_models"
MODELS = (
    "numpy-model",
    "text-model",
    "pandas-model",
    "codec-model",
    "csv-codec",
    "stream-model",
)
HANDLER_MODEL = "handler-model"
# The README's example, served by the example command too.
EXAMPLE = Path(__file__).parents[2] / "examples" / "models" / "mlserver-keywords"


def copy_folders(repository: Path, names: tuple[str, ...] = (*MODELS, HANDLER_MODEL)) -> Path:
    for name in names:
        shutil.copytree(FOLDERS / name, repository / name)
    shutil.copytree(EXAMPLE, repository / EXAMPLE.name)
    return repository
