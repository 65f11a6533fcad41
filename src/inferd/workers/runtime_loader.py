"""Find, import and load a model's runtime class.

Used both in the main process (``parallel_workers: 0``) and in worker processes.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from ..errors import ConfigurationError, ModelError
from ..model import Model, WorkerContext
from ..settings import ModelSettings

# MLServer's runtime names, so an MLServer model folder is served unchanged.
MLSERVER_RUNTIMES = {
    "mlserver_sklearn.SKLearnModel": "inferd.runtimes.sklearn.SKLearnModel",
    "mlserver_xgboost.XGBoostModel": "inferd.runtimes.xgboost.XGBoostModel",
    "mlserver_lightgbm.LightGBMModel": "inferd.runtimes.lightgbm.LightGBMModel",
    "mlserver_catboost.CatboostModel": "inferd.runtimes.catboost.CatBoostModel",
    "mlserver_onnx.OnnxModel": "inferd.runtimes.onnx.OnnxModel",
    "mlserver_mlflow.MLflowRuntime": "inferd.runtimes.mlflow.MLflowModel",
    "mlserver_huggingface.HuggingFaceRuntime": "inferd.runtimes.huggingface.HuggingFaceModel",
}


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
    return cast(type[Model], runtime)


def _import_from_folder(module_name: str, folder: Path, where: object) -> ModuleType:
    """Import ``module_name``, looking in the model's folder first.

    A module that lives in the model's folder is re-imported on every load, so a
    changed custom runtime is picked up by a repository load without a restart.
    """
    with _on_sys_path(folder):
        try:
            module = importlib.import_module(module_name)
            if _is_inside(module, folder):
                module = importlib.reload(module)
        except ModuleNotFoundError as error:
            raise ConfigurationError(
                f"{where}: cannot import {module_name!r} for the implementation: {error}"
            ) from None
    return module


def _is_inside(module: ModuleType, folder: Path) -> bool:
    file = getattr(module, "__file__", None)
    return file is not None and Path(file).resolve().is_relative_to(folder.resolve())


@contextlib.contextmanager
def _on_sys_path(folder: Path) -> Iterator[None]:
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


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
