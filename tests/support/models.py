"""Model folders for the tests: the shared ones (``benchmarks.common.models``: any model
folder, the iris model) and those serving the tests' own runtimes (tests/e2e/runtimes).

- ``add_custom_model``: a folder served by a class of tests/e2e/runtimes/testmodels.py.
- ``add_tagged_model``: an MLServer ``MLModel`` that answers the header ``x-tag``
  it was sent (tests/e2e/runtimes/tagged.py).
- ``add_triton_model``: a Triton Python-backend folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from benchmarks.common.models import *  # noqa: F403 (the shared folders, under their old names)
from benchmarks.common.models import write_model_folder

# The runtimes the end-to-end tests serve, copied into each model's folder.
TEST_RUNTIMES = Path(__file__).resolve().parents[1] / "e2e" / "runtimes" / "testmodels.py"
TAGGED_RUNTIME = TEST_RUNTIMES.with_name("tagged.py")
TRITON_ECHO = TEST_RUNTIMES.with_name("triton_echo.py")


def add_custom_model(repository: Path, folder: str, runtime: str, **settings: Any) -> Path:
    """A model folder served by ``testmodels.<runtime>`` (tests/e2e/runtimes/testmodels.py,
    copied in: the server imports it from the model's folder)."""
    files = {TEST_RUNTIMES.name: TEST_RUNTIMES}
    return write_model_folder(repository, folder, f"testmodels.{runtime}", files=files, **settings)


def add_triton_model(
    repository: Path, name: str, config: str, model_py: Path = TRITON_ECHO
) -> Path:
    """A Triton Python-backend folder: ``name/config.pbtxt`` holding ``config`` (after
    the name and backend, written here) and ``name/1/model.py`` copied from ``model_py``."""
    folder = repository / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n{config}')
    shutil.copy(model_py, folder / "1" / "model.py")
    return folder


def add_tagged_model(repository: Path, folder: str = "tagged") -> Path:
    """A folder served by tests/e2e/runtimes/tagged.py's ``Tagged`` (an MLServer
    ``MLModel``), declaring its one BYTES input ``text`` (for flat generate bodies)."""
    files = {TAGGED_RUNTIME.name: TAGGED_RUNTIME}
    inputs = [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
    return write_model_folder(repository, folder, "tagged.Tagged", files=files, inputs=inputs)
