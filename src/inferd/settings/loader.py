"""Reading settings: ``settings.json``, ``model-settings.json`` and the environment.

Validation errors become ConfigurationError messages that name the file (or the
environment variable), the key and what was expected.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import SettingsError

from inferd.errors import ConfigurationError
from inferd.settings import (
    SERVER_SETTINGS_FILE,
    CORSSettings,
    MetadataTensorSettings,
    ModelParameters,
    ModelSettings,
    ServerSettings,
)
from inferd.settings.base import given_on_the_command_line
from inferd.settings.command_line import CommandLine, CommandLineError, option_name
from inferd.settings.runtime_detect import choose_runtime, is_kserve_guess
from inferd.settings.security import RestrictedApiSettings

logger = logging.getLogger(__name__)


def env_variable(name: str, model: bool = False) -> str | None:
    """The environment variable that sets ``name``, if any (INFERD_ wins over MLSERVER_).

    Matched without regard to case, as pydantic-settings reads them.
    """
    scope = "MODEL_" if model else ""
    present = {key.upper(): key for key in os.environ}
    for prefix in _PREFIXES:
        key = present.get(f"{prefix}{scope}{name}".upper())
        if key is not None:
            return key
    return None


def _known_names(*classes: type[BaseModel]) -> dict[str, str]:
    """Field name -> how to write it, for "did you mean" hints (first class first)."""
    known: dict[str, str] = {}
    for cls in classes:
        prefix = "parameters." if cls is ModelParameters else ""
        for name in cls.model_fields:
            known.setdefault(name, prefix + name)
    return known


def _describe(
    error: ValidationError,
    model: bool,
    loc_prefix: str = "",
    flags: Mapping[str, str] | None = None,
) -> str:
    """One line per problem: the key, where its value came from, what was expected.
    ``flags``: the settings given on the command line."""
    known = (
        _known_names(ModelSettings, ModelParameters, MetadataTensorSettings)
        if model
        else _known_names(ServerSettings, CORSSettings, RestrictedApiSettings)
    )
    return "\n".join(
        _describe_one(item, model, loc_prefix, known, flags or {}) for item in error.errors()
    )


def _describe_one(
    item: ErrorDetails,
    model: bool,
    loc_prefix: str,
    known: dict[str, str],
    flags: Mapping[str, str],
) -> str:
    key = loc_prefix + ".".join(str(part) for part in item["loc"])
    name = str(item["loc"][0]) if item["loc"] else ""
    variable = env_variable(name, model) if name else None
    source = f" from environment variable {variable}" if variable else ""
    if name in flags:
        source = f" from option {option_name(name)}"
    message = item["msg"].removeprefix("Value error, ")
    if item["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(item["loc"][-1]), known, n=1, cutoff=0.75)
        message = "unknown setting" + (f"; did you mean {known[close[0]]!r}?" if close else "")
    elif variable and item["type"] in ("dict_type", "list_type", "model_type"):
        message += "; give nested values in environment variables as JSON"
    if item["type"] == "missing" or not item["loc"]:  # no loc: a check across settings
        return f"  {key or '(top level)'}: {message}"
    return f"  {key or '(top level)'}: {message} (got {item.get('input')!r}{source})"


def _describe_env_json(error: SettingsError, model: bool) -> str:
    """pydantic-settings' error for an environment value that is not valid JSON."""
    match = re.search(r'field "(\w+)"', str(error))
    variable = env_variable(match.group(1), model) if match else None
    if match is None or variable is None:
        return f"  {error}"
    return (
        f"  {match.group(1)}: environment variable {variable} must hold JSON, "
        f"got {os.environ[variable]!r}"
    )


def read_json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigurationError(f"{path}: file not found") from None
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"{path}: cannot be read as JSON: {error}") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data


def default_models_dir() -> Path:
    """The repository ``inferd start`` serves when given none: ``INFERD_MODELS_DIR`` or
    ``MLSERVER_MODELS_DIR`` (what MLServer's images and ModelMesh set), else the
    current folder."""
    variable = env_variable("models_dir")
    return Path(os.environ[variable]) if variable else Path(".")


def server_settings_file(folder: Path | None, command_line: CommandLine) -> Path | None:
    """The settings file read: ``--settings``, else ``folder/settings.json`` if present."""
    if command_line.settings_file is not None:
        return command_line.settings_file
    path = folder / SERVER_SETTINGS_FILE if folder else None
    return path if path and path.is_file() else None


def load_server_settings(
    folder: Path | None = None, *, command_line: CommandLine | None = None, **overrides: Any
) -> ServerSettings:
    """Server settings from the settings file (``folder/settings.json``, if present),
    the environment and ``command_line``'s flags, which win over the environment.

    ``overrides`` (e.g. from Ray Serve's arguments) win over the file but not the env.
    ``model_repository_root`` defaults to ``folder``; a relative one is relative to
    the file's folder when the file sets it and to the working directory when the
    environment does. Raises CommandLineError when a flag's value is refused.
    """
    command_line = command_line or CommandLine()
    path = server_settings_file(folder, command_line)
    data = read_json_file(path) if path else {}
    data.update(overrides)
    try:
        with given_on_the_command_line(command_line.values):
            settings = ServerSettings(**data)
    except (ValidationError, SettingsError) as error:
        raise _refused(error, str(path) if path else "server settings", command_line) from None
    base = path.parent if path else folder
    _resolve_repository_root(settings, folder, base)
    _resolve_security_files(settings, base)
    for name in settings.ignored_settings():
        logger.warning("Setting %r is accepted for MLServer compatibility but has no effect", name)
    return settings


def _refused(
    error: ValidationError | SettingsError, where: str, command_line: CommandLine
) -> ConfigurationError:
    if isinstance(error, SettingsError):
        return ConfigurationError(f"{where}: invalid settings:\n{_describe_env_json(error, False)}")
    problems = _describe(error, False, flags=command_line.values)
    flagged = {str(item["loc"][0]) for item in error.errors() if item["loc"]}
    flagged &= set(command_line.values)
    if not flagged:
        return ConfigurationError(f"{where}: invalid settings:\n{problems}")
    if len(flagged) == len(error.errors()):  # the file and the environment are not at fault
        where = "command line"
    return CommandLineError(f"{where}: invalid settings:\n{problems}")


def _resolve_repository_root(
    settings: ServerSettings, folder: Path | None, base: Path | None
) -> None:
    """``base``: the settings file's folder, which its relative paths start from."""
    if "model_repository_root" not in settings.model_fields_set:
        settings.model_repository_root = str(folder or ".")
        return
    settings.model_repository_root = _absolute(
        settings.model_repository_root, "model_repository_root", base
    )


def _resolve_security_files(settings: ServerSettings, folder: Path | None) -> None:
    """Relative TLS and key files, as ``model_repository_root``: against the settings
    file's ``folder`` when the file names them, the working directory when the
    environment does."""
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs"):
        value = getattr(settings, name)
        if value is not None:
            setattr(settings, name, _absolute(value, name, folder))
    for restriction in settings.restricted_apis:
        if restriction.values_from_file is not None:
            restriction.values_from_file = _absolute(
                restriction.values_from_file, "restricted_apis", folder
            )


def _absolute(path: str, name: str, folder: Path | None) -> str:
    if Path(path).is_absolute():
        return path
    from_env = env_variable(name) is not None
    return str((Path.cwd() if from_env or folder is None else folder) / path)


def model_settings_from_dict(data: dict[str, Any], source: Path | None) -> ModelSettings:
    """Validate one model's settings, applying the model environment variables.

    A relative ``parameters.uri`` from the environment is made absolute against the
    working directory (one in a file stays relative to the file's folder).
    """
    data = dict(data)
    where = str(source) if source else "model settings from the environment"
    raw_parameters = data.pop("parameters", None) or {}
    if not isinstance(raw_parameters, dict):
        raise ConfigurationError(f"{where}: parameters: must be a JSON object")
    settings = _validate_model(where, data, raw_parameters)
    settings._source = source
    if source is not None and not settings.name:
        settings.name = source.parent.name
    uri = settings.parameters.uri if settings.parameters else None
    if settings.parameters and uri and env_variable("uri", model=True):
        settings.parameters.uri = str(Path.cwd() / uri)
    return settings


def _validate_model(
    where: str, data: dict[str, Any], raw_parameters: dict[str, Any]
) -> ModelSettings:
    problems = []
    try:
        parameters: ModelParameters | None = ModelParameters(**raw_parameters)
    except ValidationError as error:
        parameters = None
        problems.append(_describe(error, True, loc_prefix="parameters."))
    except SettingsError as error:
        parameters = None
        problems.append(_describe_env_json(error, True))
    try:
        settings = ModelSettings(**data, parameters=parameters)
    except ValidationError as error:
        problems.insert(0, _describe(error, True))
    except SettingsError as error:
        problems.insert(0, _describe_env_json(error, True))
    if problems:
        problems_text = "\n".join(problems)
        raise ConfigurationError(f"{where}: invalid model settings:\n{problems_text}")
    return settings


def load_model_settings(path: Path, file_name_wins: bool = False) -> ModelSettings:
    """``file_name_wins``: the model is named by its file (its "name", else its folder)
    even when ``MLSERVER_MODEL_NAME`` is set (see ModelRepository's ``loaded_later``)."""
    data = read_json_file(path)
    settings = model_settings_from_dict(data, path.resolve())
    if data.get("implementation") and is_kserve_guess(settings.implementation):
        # KServe's environment guesses (an empty modelClass, or its scikit-learn
        # fallback); a model-settings.json shipped with the model knows.
        settings.implementation = data["implementation"]
    if file_name_wins:
        name = data.get("name")
        settings.name = name if isinstance(name, str) and name else path.resolve().parent.name
    _warn_ignored_once(settings)
    return settings


# Settings files are read again on every repository index: warn about each once.
_warned_ignored: set[tuple[Path | None, str]] = set()


def _warn_ignored_once(settings: ModelSettings) -> None:
    for name in settings.ignored_settings():
        if (settings.source, name) not in _warned_ignored:
            _warned_ignored.add((settings.source, name))
            logger.warning(
                "%s: setting %r is accepted for MLServer compatibility but has no effect",
                settings.source or f"model {settings.name!r}",
                name,
            )


def model_settings_from_env() -> ModelSettings | None:
    """The one model KServe describes with ``MLSERVER_MODEL_*`` variables, if any.

    Without an implementation the runtime is told from the files at the uri (see
    :mod:`inferd.settings.runtime_detect`). A name alone describes no model: ModelMesh sets a
    placeholder name and loads its models later through the repository API."""
    if not any(env_variable(name, model=True) for name in ("name", "implementation", "uri")):
        return None
    settings = model_settings_from_dict({}, None)
    uri_given = bool(settings.parameters and settings.parameters.uri)
    chosen = choose_runtime(settings.implementation, settings.uri if uri_given else None)
    if chosen != settings.implementation:
        _note_once(f"{settings.label}: runtime {chosen} chosen from the files at {settings.uri}")
        settings.implementation = chosen
    if settings.name and not settings.implementation and not uri_given:
        _note_once(f"{settings.label} from the environment has no implementation: not served")
        return None
    if not settings.name or not settings.implementation:
        raise ConfigurationError(
            "A model described by environment variables needs both MLSERVER_MODEL_NAME "
            "(or INFERD_MODEL_NAME) and MLSERVER_MODEL_IMPLEMENTATION "
            "(or INFERD_MODEL_IMPLEMENTATION)"
            + (f"; no runtime could be told from the files at {settings.uri}" if uri_given else "")
        )
    _warn_ignored_once(settings)
    return settings


_noted: set[str] = set()


def _note_once(message: str) -> None:
    """The environment's model is read again on every repository scan: say things once."""
    if message not in _noted:
        _noted.add(message)
        logger.info(message)


_PREFIXES = ("INFERD_", "MLSERVER_")
