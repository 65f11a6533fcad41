"""Importing the user's model code from a file of a model folder.

Two loaders need it: the runtime loader (a custom runtime's ``models.py`` named by
``implementation``) and Triton's Python backend (``N/model.py``). Both import one
file under a name of their own, registered in ``sys.modules`` so that pickle,
dataclasses and typing find it, with the file's folder on ``sys.path`` while the
module runs so that it can import the modules beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType


def unique_module_name(prefix: str, folder: Path, suffix: str = "") -> str:
    """A module name no other model folder gets: two folders may both hold ``model.py``."""
    digest = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:12]
    return f"{prefix}_{digest}{suffix}"


def import_file(path: Path, module_name: str, folder: Path) -> ModuleType:
    """Run ``path`` as the module ``module_name`` with ``folder`` on ``sys.path``.

    ModuleNotFoundError when the file cannot be imported at all; what the module
    raises while it runs propagates unchanged (each loader words its own error).
    """
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    with on_sys_path(folder):
        spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def on_sys_path(folder: Path) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for the duration of the block."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)
