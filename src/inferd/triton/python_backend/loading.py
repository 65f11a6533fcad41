"""Importing a ``model.py`` and what ``initialize(args)`` is given.

Each ``model.py`` is executed afresh under a name unique to its file (two models'
files are both called ``model.py``), with ``triton_python_backend_utils`` in
``sys.modules`` and its own folder on ``sys.path`` while it is imported (a model
may import modules beside it, as in Triton).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.errors import ConfigurationError
from inferd.settings import ModelSettings
from inferd.triton.python_backend import pb_utils
from inferd.user_code import import_file, unique_module_name

PB_UTILS = "triton_python_backend_utils"
MODEL_FILE = "model.py"
MODEL_CLASS = "TritonPythonModel"


def serve_pb_utils() -> None:
    """Make ``import triton_python_backend_utils`` find inferd's."""
    sys.modules.setdefault(PB_UTILS, pb_utils)


def model_class(path: Path) -> type:
    """The ``TritonPythonModel`` class of the ``model.py`` at ``path``."""
    module = _import(path)
    found = getattr(module, MODEL_CLASS, None)
    if not isinstance(found, type):
        raise ConfigurationError(f"{path}: defines no class {MODEL_CLASS}")
    return found


def model_file(settings: ModelSettings) -> Path:
    config = settings.extra["triton_config"]
    return settings.uri / (config.get("default_model_filename") or MODEL_FILE)


def instantiate(settings: ModelSettings) -> Any:
    return model_class(model_file(settings))()


def initialize_args(settings: ModelSettings, config: dict[str, Any]) -> dict[str, str]:
    """``initialize``'s ``args``: every value a string, as Triton gives them."""
    gpus = settings.cuda_devices
    kind = config.get("instance_group", [{}])[0].get("kind", "KIND_CPU")
    return {
        "model_config": json.dumps(config),
        "model_instance_kind": "GPU" if kind == "KIND_GPU" or gpus else "CPU",
        "model_instance_name": f"{settings.name}_0",
        "model_instance_device_id": _device_id(gpus),
        "model_repository": str(settings.uri.parent),
        "model_version": settings.version or "1",
        "model_name": settings.name,
    }


def _device_id(gpus: list[str]) -> str:
    if not gpus:
        return "0"
    _, _, index = gpus[0].partition(":")
    return index if index.isdigit() else "0"


def _import(path: Path) -> ModuleType:
    if not path.is_file():
        raise ConfigurationError(f"{path}: no such file")
    serve_pb_utils()
    name = unique_module_name("_inferd_triton_model", path)
    try:
        return import_file(path, name, path.parent)
    except ConfigurationError:
        raise
    except Exception as error:
        raise ConfigurationError(
            f"{path}: importing it failed: {type(error).__name__}: {error}"
        ) from error
