"""A Triton model folder in the repository: ``<model>/config.pbtxt`` and version folders.

Served here: Python-backend models (``<model>/<version>/model.py``, with or
without ``config.pbtxt``: ``auto_complete_config`` completes it), ensembles
(``platform: "ensemble"``) and vllm_backend models (``backend: "vllm"``,
triton/vllm_folder.py). Each served version becomes a model version's
settings, its runtime :class:`~inferd.triton.python_backend.runtime.PythonBackendModel`
or :class:`~inferd.triton.ensemble.EnsembleModel`, its whole configuration (Triton's
JSON form) in ``parameters.extra["triton_config"]``. Versions follow Triton's
version policy (default: the latest one).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from inferd.errors import ConfigurationError
from inferd.settings import MODEL_SETTINGS_FILE, ModelSettings
from inferd.settings.loader import model_settings_from_dict
from inferd.settings.warmup import TRITON_DATATYPES
from inferd.triton.config_schema import to_json
from inferd.triton.pbtxt import parse
from inferd.triton.python_backend.loading import MODEL_FILE, model_class
from inferd.triton.python_backend.modelconfig import ModelConfig
from inferd.triton.vllm_folder import (
    VLLM_BACKEND,
    VLLM_RUNTIME,
    completed_config,
    engine_settings,
)

CONFIG_FILE = "config.pbtxt"
PYTHON_RUNTIME = "inferd.triton.python_backend.runtime.PythonBackendModel"
ENSEMBLE_RUNTIME = "inferd.triton.ensemble.EnsembleModel"
CONFIG_KEY = "triton_config"

# auto_complete_config's answer by (model.py, its mtime, config.pbtxt's text): the
# repository is read again on every index, a model's module is imported once.
_completed: dict[tuple[Path, int, str], dict[str, Any]] = {}


def is_triton_model(folder: Path) -> bool:
    """Whether ``folder`` holds a Triton model: a ``config.pbtxt``, or only version
    folders with a ``model.py`` (and no ``model-settings.json``: an MLServer runtime's
    file may be called ``model.py`` too)."""
    if (folder / CONFIG_FILE).is_file():
        return True
    return any(
        (version / MODEL_FILE).is_file() and not (version / MODEL_SETTINGS_FILE).is_file()
        for version in _version_folders(folder)
    )


def read_model(folder: Path) -> list[ModelSettings]:
    """The settings of each version of the Triton model in ``folder`` to serve;
    ConfigurationError naming the file and the field for what cannot be served."""
    config_path = folder / CONFIG_FILE
    text = config_path.read_text() if config_path.is_file() else ""
    where = str(config_path)
    config = to_json(parse(text, where), where)
    name = config.setdefault("name", folder.name)
    if name != folder.name:
        raise ConfigurationError(
            f"{where}: name {name!r} differs from its folder's name {folder.name!r}; "
            "Triton names a model by its folder"
        )
    versions = _served_versions(folder, config, where)
    _with_defaults(config)
    if config.get("platform") == "ensemble":
        _check_ensemble(config, where)
        implementation = ENSEMBLE_RUNTIME
    elif config["backend"] == VLLM_BACKEND and not config["platform"]:
        config = completed_config(config)
        return [
            _settings(folder, v, config, VLLM_RUNTIME, where, engine_settings(folder / str(v)))
            for v in versions
        ]
    else:
        _check_python(config, where)
        config = _auto_completed(folder / str(versions[-1]) / _model_file(config), config, text)
        if not config["instance_group"]:
            config["instance_group"] = [{"name": name, "kind": "KIND_CPU", "count": 1}]
        implementation = PYTHON_RUNTIME
    return [_settings(folder, version, config, implementation, where) for version in versions]


def _with_defaults(config: dict[str, Any]) -> None:
    """The fields Triton's JSON form always has (``auto_complete_config`` and
    ``initialize`` read ``config["input"]`` of a config.pbtxt that sets none)."""
    for key, default in (
        ("platform", ""),
        ("max_batch_size", 0),
        ("input", []),
        ("output", []),
        ("parameters", {}),
        ("model_transaction_policy", {"decoupled": False}),
        ("version_policy", {"latest": {"num_versions": 1}}),
    ):
        config.setdefault(key, default)
    if config["platform"] != "ensemble":
        config.setdefault("backend", "python")
        config.setdefault("instance_group", [])


def _version_folders(folder: Path) -> list[Path]:
    try:
        children = list(os.scandir(folder))
    except OSError:
        return []
    return [Path(child.path) for child in children if child.is_dir() and child.name.isdigit()]


def _served_versions(folder: Path, config: dict[str, Any], where: str) -> list[int]:
    present = sorted(int(version.name) for version in _version_folders(folder))
    if not present:
        raise ConfigurationError(
            f"{where}: no version folder (e.g. {folder / '1'}) holds the model; Triton "
            "serves a model's numbered folders"
        )
    policy = config.get("version_policy", {"latest": {}})
    if "all" in policy:
        return present
    if "specific" in policy:
        wanted = set(policy["specific"].get("versions", []))
        missing = wanted - set(present)
        if missing:
            raise ConfigurationError(
                f"{where}: version_policy.specific names versions {sorted(missing)} that "
                f"have no folder (present: {present})"
            )
        return sorted(wanted)
    count = policy.get("latest", {}).get("num_versions", 1) or 1
    return present[-count:]


def _model_file(config: dict[str, Any]) -> str:
    return str(config.get("default_model_filename") or MODEL_FILE)


def _check_python(config: dict[str, Any], where: str) -> None:
    backend = config["backend"]
    platform = config["platform"]
    if backend != "python" or platform:
        served = f"backend {backend!r}" if not platform else f"platform {platform!r}"
        raise ConfigurationError(
            f"{where}: {served} is not served by inferd; Triton models are served when they "
            'use the Python backend (backend: "python"), vLLM (backend: "vllm") or are '
            'ensembles (platform: "ensemble")'
        )


def _check_ensemble(config: dict[str, Any], where: str) -> None:
    steps = config.get("ensemble_scheduling", {}).get("step", [])
    if not steps:
        raise ConfigurationError(f"{where}: an ensemble needs ensemble_scheduling.step entries")
    for index, step in enumerate(steps):
        if not step.get("model_name"):
            raise ConfigurationError(f"{where}: ensemble step {index} has no model_name")
    if "dynamic_batching" in config or "instance_group" in config:
        raise ConfigurationError(
            f"{where}: an ensemble has no dynamic_batching or instance_group of its own "
            "(its composing models batch)"
        )


def _auto_completed(model_py: Path, config: dict[str, Any], text: str) -> dict[str, Any]:
    """The configuration after the model's ``auto_complete_config``, if it has one."""
    try:
        key = (model_py, model_py.stat().st_mtime_ns, text)
    except OSError:
        raise ConfigurationError(f"{model_py}: no such file (the model's code)") from None
    done = _completed.get(key)
    if done is None:
        done = _completed[key] = _complete(model_py, config)
    return done


def _complete(model_py: Path, config: dict[str, Any]) -> dict[str, Any]:
    complete = getattr(model_class(model_py), "auto_complete_config", None)
    if complete is None:
        return config
    try:
        answered = complete(ModelConfig(config))
    except Exception as error:
        raise ConfigurationError(
            f"{model_py}: auto_complete_config failed: {type(error).__name__}: {error}"
        ) from error
    if not isinstance(answered, ModelConfig):
        raise ConfigurationError(
            f"{model_py}: auto_complete_config must return the ModelConfig it was given"
        )
    return answered.as_dict()


def _settings(
    folder: Path,
    version: int,
    config: dict[str, Any],
    implementation: str,
    where: str,
    extra: dict[str, Any] | None = None,
) -> ModelSettings:
    max_batch = int(config.get("max_batch_size", 0))
    batching = config.get("dynamic_batching")
    data: dict[str, Any] = {
        "name": config["name"],
        "platform": config.get("platform") or config.get("backend", ""),
        "implementation": implementation,
        "inputs": [_tensor(tensor, max_batch, where) for tensor in config.get("input", [])],
        "outputs": [_tensor(tensor, max_batch, where) for tensor in config.get("output", [])],
        # Triton batches on the server only with dynamic_batching; inferd from 2 rows up.
        "max_batch_size": max_batch if batching is not None else 0,
        "parameters": {
            "uri": str(folder / str(version)),
            "version": str(version),
            "extra": {CONFIG_KEY: config, **(extra or {})},
        },
    }
    if batching is not None:
        data.update(_batching(batching))
    if "sequence_batching" in config:  # each sequence on one holder, in order
        data["sequence_batching"] = config["sequence_batching"]
    instances = sum(group.get("count", 1) for group in config.get("instance_group", []))
    if instances > 1:
        # More than Triton's default of one: that many worker processes hold it. One
        # leaves inferd's placement alone (a copy per protocol process, or per worker).
        data["workers"] = instances
    return model_settings_from_dict(data, folder / CONFIG_FILE)


def _tensor(tensor: dict[str, Any], max_batch: int, where: str) -> dict[str, Any]:
    name = tensor.get("name")
    datatype = TRITON_DATATYPES.get(tensor.get("data_type", ""))
    if not name or datatype is None:
        raise ConfigurationError(
            f"{where}: every input and output needs a name and a data_type, got {tensor}"
        )
    dims = [int(d) for d in tensor.get("dims", [])]
    return {"name": name, "datatype": datatype, "shape": ([-1] if max_batch > 0 else []) + dims}


def _batching(batching: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"max_batch_time": batching.get("max_queue_delay_microseconds", 0) / 1e6}
    if batching.get("default_priority_level"):
        out["default_priority_level"] = batching["default_priority_level"]
    policy = batching.get("default_queue_policy", {})
    if policy.get("max_queue_size"):
        out["max_queue_size"] = policy["max_queue_size"]
    if policy.get("default_timeout_microseconds"):
        out["timeout"] = policy["default_timeout_microseconds"] / 1e6
    return out
