"""Find, import and load a model's runtime class.

Used both in the main process (``parallel_workers: 0``) and in worker processes
(through :class:`~inferd.workers.loaded_model.LoadedModel`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from inferd.compat.importer import install_mlserver_alias
from inferd.compat.mlmodel_runtime import mlmodel_base, runtime_class_for
from inferd.errors import ConfigurationError, ModelError
from inferd.model import Model, WorkerContext
from inferd.settings import MODEL_SETTINGS_FILE, ModelSettings
from inferd.settings.runtime_names import MLSERVER_RUNTIMES
from inferd.user_code import import_file, unique_module_name

logger = logging.getLogger(__name__)


def resolve_runtime_class(settings: ModelSettings) -> type[Model]:
    """The class named by ``implementation``, importable from the model's folder."""
    where = settings.source or f"model {settings.name!r}"
    path = settings.implementation
    if not path:
        raise ConfigurationError(
            f"{where}: no 'implementation' set; name the runtime class, "
            "e.g. inferd.runtimes.sklearn.SKLearnModel"
        )
    path = MLSERVER_RUNTIMES.get(path, path)
    install_mlserver_alias()  # MLServer custom runtimes `import mlserver`
    module_name, _, class_name = path.rpartition(".")
    if not module_name:
        raise ConfigurationError(
            f"{where}: implementation {path!r} must be a dotted path: module.ClassName"
        )
    module = _import_from_folder(module_name, settings.folder, where)
    runtime = getattr(module, class_name, None)
    if not inspect.isclass(runtime) or not callable(getattr(runtime, "predict", None)):
        raise ConfigurationError(
            f"{where}: implementation {path!r}: module {module_name!r} has no runtime class "
            f"{class_name!r} (a subclass of inferd.Model)"
        )
    base = mlmodel_base(runtime)
    if base is not None:  # an MLServer custom runtime: served through the adapter
        return runtime_class_for(runtime, base)
    return cast(type[Model], runtime)


def _import_from_folder(module_name: str, folder: Path, where: object) -> ModuleType:
    """Import ``module_name``, from the model's folder when it lives there.

    A module in the model's folder is executed afresh on every load, under a name
    unique to that folder: two models may each ship a ``runtime.py``, and a
    changed runtime is picked up by a repository load without a restart.
    """
    local_file = _module_file(folder, module_name)
    try:
        if local_file is None:
            return importlib.import_module(module_name)
        return _exec_module_file(local_file, module_name, folder)
    except ModuleNotFoundError as error:
        raise ConfigurationError(
            f"{where}: cannot import {module_name!r} for the implementation: {error}"
        ) from None


def _module_file(folder: Path, module_name: str) -> Path | None:
    base = folder.joinpath(*module_name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _exec_module_file(path: Path, module_name: str, folder: Path) -> ModuleType:
    unique_name = unique_module_name("_inferd_model", folder, "_" + module_name.replace(".", "_"))
    _forget_modules_named_like_files_in(folder)
    return import_file(path, unique_name, folder)  # the runtime may import modules beside it


def _forget_modules_named_like_files_in(folder: Path) -> None:
    """Drop cached modules that share a name with a module in ``folder``.

    The runtime's own imports (``from helpers import x``) must find this folder's
    ``helpers.py``, not one another model's folder (or an earlier version of this
    one) left in ``sys.modules``. Models already loaded keep the modules they hold.
    """
    names = {path.stem for path in folder.glob("*.py")}
    names |= {path.parent.name for path in folder.glob("*/__init__.py")}
    for cached, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if cached.partition(".")[0] in names and file and _in_a_model_folder(Path(file)):
            del sys.modules[cached]


def _in_a_model_folder(path: Path) -> bool:
    """Whether a module file came from a model folder (never the stdlib or site-packages)."""
    return any((parent / MODEL_SETTINGS_FILE).is_file() for parent in path.parents[:2])


async def load_runtime(settings: ModelSettings, context: WorkerContext) -> Model:
    """Instantiate and load the model's runtime; ModelError when that fails."""
    runtime_class = resolve_runtime_class(settings)
    try:
        model = runtime_class(settings, context)
        result: Any = model.load()
        if inspect.isawaitable(result):
            result = await result
    except (ConfigurationError, ModelError):
        raise
    except Exception as error:
        raise ModelError(f"Loading model {settings.name!r} failed: {describe(error)}") from error
    if result is False:
        raise ModelError(f"Loading model {settings.name!r} failed: its load() returned False")
    model.ready = True
    return model


def describe(error: BaseException) -> str:
    """``Type: message`` for errors raised inside a model's own code."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
