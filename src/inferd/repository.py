"""The model repository: a folder tree holding ``model-settings.json`` files.

Every folder under the root that holds a ``model-settings.json`` is one model
version (MLServer's layout). With none at all, the model described by the
``MLSERVER_MODEL_*`` environment variables is served (how KServe starts a server).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigurationError
from .settings import MODEL_SETTINGS_FILE, ModelSettings
from .settings_loader import env_variable, load_model_settings, model_settings_from_env

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokenModel:
    """A ``model-settings.json`` that cannot be used, and why."""

    # The model it most likely belongs to: the name in the file if it can be read,
    # else its folder's name (the default name). Kept as ``folder`` for callers.
    folder: str
    error: str


@dataclass(slots=True)
class RepositoryScan:
    """What the repository holds right now: usable settings and broken files."""

    models: list[ModelSettings] = field(default_factory=list)
    broken: list[BrokenModel] = field(default_factory=list)


class ModelRepository:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def find_all(self) -> list[ModelSettings]:
        """Settings of every model version in the repository (read from disk now).

        Raises ConfigurationError naming the file when any of them is invalid.
        """
        scan = self.scan()
        if scan.broken:
            raise ConfigurationError("\n".join(broken.error for broken in scan.broken))
        _check_unique_versions(scan.models)
        return scan.models

    def find(self, name: str) -> list[ModelSettings]:
        """Every version of the model called ``name``; empty if there is none.

        A broken settings file elsewhere in the repository does not stop another
        model from loading; one in this model's own folder does.
        """
        scan = self.scan()
        found = [settings for settings in scan.models if settings.name == name]
        own_broken = [broken for broken in scan.broken if broken.folder == name]
        if own_broken or (scan.broken and not found):
            problems = own_broken or scan.broken
            raise ConfigurationError("\n".join(broken.error for broken in problems))
        _check_unique_versions(found)
        return found

    def scan(self) -> RepositoryScan:
        """Read every ``model-settings.json`` now, keeping the broken ones apart."""
        scan = RepositoryScan()
        files = self._settings_files()
        for path in files:
            try:
                scan.models.append(load_model_settings(path))
            except ConfigurationError as error:
                scan.broken.append(BrokenModel(_guess_name(path), str(error)))
        if not files:
            from_env = model_settings_from_env()
            if from_env is not None:
                scan.models.append(from_env)
        return scan

    def _settings_files(self) -> list[Path]:
        if not self.root.is_dir():
            raise ConfigurationError(f"Model repository {self.root} is not a folder")
        files = []
        for folder, subfolders, filenames in os.walk(self.root):
            subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
            if MODEL_SETTINGS_FILE in filenames:
                files.append(Path(folder) / MODEL_SETTINGS_FILE)
        return files


def _guess_name(settings_file: Path) -> str:
    """The name a broken settings file was meant to give its model."""
    try:
        name = json.loads(settings_file.read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        name = None
    return name if isinstance(name, str) and name else settings_file.parent.name


def _check_unique_versions(found: list[ModelSettings]) -> None:
    seen: dict[tuple[str, str | None], ModelSettings] = {}
    for settings in found:
        key = (settings.name, settings.version)
        if key in seen:
            version = f" version {settings.version!r}" if settings.version else ""
            raise ConfigurationError(
                f"Model {settings.name!r}{version} is defined twice: in {seen[key].source} "
                f"and in {settings.source}; give each a different name or parameters.version"
                + _env_hint()
            )
        seen[key] = settings


def _env_hint() -> str:
    """Why two files may clash on a name or version neither of them sets."""
    variables = [env_variable(name, model=True) for name in ("name", "version")]
    named = [variable for variable in variables if variable]
    if not named:
        return ""
    return (
        f" ({' and '.join(named)} set in the environment apply to every model: "
        "unset them to serve several)"
    )
