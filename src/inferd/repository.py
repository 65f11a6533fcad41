"""The model repository: a folder tree holding ``model-settings.json`` files.

Every folder under the root that holds a ``model-settings.json`` is one model
version (MLServer's layout). With none at all, the model described by the
``MLSERVER_MODEL_*`` environment variables is served (how KServe starts a server).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .errors import ConfigurationError
from .settings import (
    MODEL_SETTINGS_FILE,
    ModelSettings,
    load_model_settings,
    model_settings_from_env,
)

logger = logging.getLogger(__name__)


class ModelRepository:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def find_all(self) -> list[ModelSettings]:
        """Settings of every model version in the repository (read from disk now).

        Raises ConfigurationError naming the file when any of them is invalid.
        """
        found = [load_model_settings(path) for path in self._settings_files()]
        if not found:
            from_env = model_settings_from_env()
            if from_env is not None:
                found = [from_env]
        _check_unique_versions(found)
        return found

    def find(self, name: str) -> list[ModelSettings]:
        """Every version of the model called ``name``; empty if there is none."""
        return [settings for settings in self.find_all() if settings.name == name]

    def _settings_files(self) -> list[Path]:
        if not self.root.is_dir():
            raise ConfigurationError(f"Model repository {self.root} is not a folder")
        files = []
        for folder, subfolders, filenames in os.walk(self.root):
            subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
            if MODEL_SETTINGS_FILE in filenames:
                files.append(Path(folder) / MODEL_SETTINGS_FILE)
        return files


def _check_unique_versions(found: list[ModelSettings]) -> None:
    seen: dict[tuple[str, str | None], ModelSettings] = {}
    for settings in found:
        key = (settings.name, settings.version)
        if key in seen:
            version = f" version {settings.version!r}" if settings.version else ""
            raise ConfigurationError(
                f"Model {settings.name!r}{version} is defined twice: in {seen[key].source} "
                f"and in {settings.source}; give each a different name or parameters.version"
            )
        seen[key] = settings
