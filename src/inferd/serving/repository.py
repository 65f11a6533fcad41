"""The model repository: a folder tree holding ``model-settings.json`` files.

Every folder under the root that holds a ``model-settings.json`` is one model
version (MLServer's layout). With none at all, the model described by the
``MLSERVER_MODEL_*`` environment variables is served (how KServe starts a server).

Models are read only from under the root. The settings files are found by walking
it without following symlinked folders, and a settings file's ``parameters.uri``,
resolved against its folder with ``..`` collapsed, must name a path under the root.
Symlinks are not resolved for that check, so a link placed inside the root may point
anywhere: KServe's and ModelMesh's layouts link artifacts kept elsewhere, and only
someone who can write inside the root can make a link there. A uri given by an
environment variable (``MLSERVER_MODEL_URI``) is the operator's, as the command
line is, and is not checked.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from inferd.errors import ConfigurationError, ModelNotFound, NotInRepository
from inferd.settings import MODEL_SETTINGS_FILE, ModelSettings
from inferd.settings.loader import env_variable, load_model_settings, model_settings_from_env
from inferd.triton.model_folder import CONFIG_FILE, is_triton_model, read_model
from inferd.triton.override import failed
from inferd.triton.python_backend.loading import MODEL_FILE

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokenModel:
    """A ``model-settings.json`` that cannot be used, and why."""

    # The model it most likely belongs to: the name in the file if it can be read,
    # else its folder's name (the default name). Kept as ``folder`` for callers.
    folder: str
    error: str
    name_known: bool = True  # False: the file's "name" could not be read


@dataclass(slots=True)
class RepositoryScan:
    """What the repository holds right now: usable settings and broken files."""

    models: list[ModelSettings] = field(default_factory=list)
    broken: list[BrokenModel] = field(default_factory=list)
    # Each folder holding a settings file (as walked, under the root) -> the name of
    # its model, when its file gives one (a broken file may not): which model a
    # changed folder is.
    names: dict[Path, str] = field(default_factory=dict)


class ModelRepository:
    def __init__(self, root: Path, loaded_later: bool = False) -> None:
        """``loaded_later``: models come through the repository API after the start
        (``load_models_at_startup: false``), as ModelMesh and Seldon Core load them. Then
        a root that does not exist (yet) holds no models, rather than being an error
        (ModelMesh's adapter creates it), and each settings file names its own model:
        ``MLSERVER_MODEL_NAME`` is ModelMesh's placeholder, not a name for every model."""
        self.root = root.resolve()
        self._loaded_later = loaded_later
        # The root as written and as resolved: a uri may name either (e.g. through
        # /models when /models is itself a link).
        self._roots = {Path(os.path.normpath(root.absolute())), self.root}

    def find_all(self) -> list[ModelSettings]:
        """Settings of every model version in the repository (read from disk now).

        Raises ConfigurationError naming the file when any of them is invalid.
        """
        scan = self.scan()
        if scan.broken:
            raise ConfigurationError("\n".join(broken.error for broken in scan.broken))
        _check_unique_versions(scan.models)
        return scan.models

    def find(self, name: str, scan: RepositoryScan | None = None) -> list[ModelSettings]:
        """Every version of the model called ``name``; empty if there is none (in
        ``scan`` when given: a recent look, as loads on request reuse one).

        A broken settings file elsewhere in the repository does not stop another
        model from loading; one meant for this model (by its "name", or its folder
        when that cannot be read) does. An unknown name is ModelNotFound, which
        mentions the broken files whose name could not be read (one may be it).
        """
        scan = self.scan() if scan is None else scan
        found = [settings for settings in scan.models if settings.name == name]
        own_broken = [broken for broken in scan.broken if broken.folder == name]
        if own_broken:
            raise ConfigurationError("\n".join(broken.error for broken in own_broken))
        unnamed = [broken for broken in scan.broken if not broken.name_known]
        if not found and unnamed:
            raise ModelNotFound(name, hint=_maybe_it(unnamed))
        _check_unique_versions(found)
        return found

    def to_load(self, name: str) -> list[ModelSettings]:
        """The versions of ``name`` a repository load reads, or the error a load
        answers, in Triton's words ("failed to load 'name', ...")."""
        try:
            found = self.find(name)
        except ConfigurationError as error:
            raise failed(name, str(error)) from None
        except ModelNotFound as error:  # unknown, and some settings files unreadable
            raise NotInRepository(name, error.hint) from None
        if not found:
            raise NotInRepository(name)
        return found

    def holds(
        self, name: str, version: str | None = None, scan: RepositoryScan | None = None
    ) -> bool:
        """Whether the repository on disk (or ``scan`` of it) has a model ``name`` (in
        ``version``, when given), loaded or not; a folder of that name with broken
        settings counts."""
        try:
            scan = self.scan() if scan is None else scan
        except ConfigurationError:
            return False  # no readable repository: it holds nothing
        if any(broken.folder == name for broken in scan.broken):
            return True
        return any(
            found.name == name and (version is None or found.version == version)
            for found in scan.models
        )

    def scan(self) -> RepositoryScan:
        """Read every ``model-settings.json`` now, keeping the broken ones apart."""
        scan = RepositoryScan()
        files, triton_folders = self._model_folders()
        for folder in triton_folders:
            _read_triton_model(folder, scan)
        for path in files:
            try:
                settings = load_model_settings(path, file_name_wins=self._loaded_later)
                self._check_inside(settings)
                scan.models.append(settings)
                scan.names[path.parent] = settings.name
            except ConfigurationError as error:
                name = _name_in(path)
                guess = name or path.parent.name
                scan.broken.append(BrokenModel(guess, str(error), name_known=name is not None))
                if name is not None:
                    scan.names[path.parent] = name
        if not files and not triton_folders:
            from_env = model_settings_from_env()
            if from_env is not None:
                scan.models.append(from_env)
        return scan

    def _check_inside(self, settings: ModelSettings) -> None:
        """ConfigurationError if the model's uri leaves the root (see the module's doc)."""
        if env_variable("uri", model=True) is not None:
            return
        uri = Path(os.path.normpath(settings.uri))  # lexical: ".." collapsed, links kept
        if any(uri == root or root in uri.parents for root in self._roots):
            return
        written = settings.parameters.uri if settings.parameters else None
        raise ConfigurationError(
            f"{settings.source}: parameters.uri {written!r} names {uri}, outside the model "
            f"repository {self.root}; models are read only from under model_repository_root: "
            "move the files under it, or link to them from inside it (symlinks are followed)"
        )

    def _model_folders(self) -> tuple[list[Path], list[Path]]:
        """The ``model-settings.json`` files, and the folders of Triton models
        (``config.pbtxt``, version folders with ``model.py``), under the root."""
        if not self.root.is_dir():
            if not self.root.exists():
                if self._loaded_later:
                    return [], []
                raise ConfigurationError(
                    f"Model repository {self.root} is not a folder: it does not exist; create "
                    "it, or set load_models_at_startup to false to start with no models and "
                    "load them into it later through the repository API"
                )
            raise ConfigurationError(f"Model repository {self.root} is not a folder")
        files: list[Path] = []
        triton: list[Path] = []
        for folder, subfolders, filenames in os.walk(self.root):
            subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
            if MODEL_SETTINGS_FILE in filenames:
                files.append(Path(folder) / MODEL_SETTINGS_FILE)
            elif Path(folder) != self.root and is_triton_model(Path(folder)):
                triton.append(Path(folder))
                subfolders[:] = []  # its version folders are its own
        _report_unknown_folders(self.root, files, triton)
        return files, triton


def _read_triton_model(folder: Path, scan: RepositoryScan) -> None:
    try:
        scan.models.extend(read_model(folder))
    except ConfigurationError as error:
        scan.broken.append(BrokenModel(folder.name, str(error)))
    scan.names[folder] = folder.name


# Folders of the root already reported as holding no model (the index reads it often).
_reported: set[Path] = set()


def _report_unknown_folders(root: Path, files: list[Path], triton: list[Path]) -> None:
    """Log, once, each folder of the root that holds neither kind of model (unless the
    environment describes the model: KServe's root holds its artifacts)."""
    if any(env_variable(name, model=True) for name in ("uri", "implementation")):
        return
    used = {root / path.relative_to(root).parts[0] for path in [*files, *triton]}
    try:
        children = [Path(entry.path) for entry in os.scandir(root) if entry.is_dir()]
    except OSError:
        return
    for child in children:
        if child.name.startswith(".") or child in used or child in _reported:
            continue
        _reported.add(child)
        logger.warning(
            "%s holds no model: neither a %s (an MLServer or inferd model) nor a %s or a "
            "version folder with %s (a Triton model) is in it",
            child,
            MODEL_SETTINGS_FILE,
            CONFIG_FILE,
            MODEL_FILE,
        )


def _name_in(settings_file: Path) -> str | None:
    """The name a broken settings file gives its model: its "name", or its folder's
    when it sets none (the default name); None when that cannot be read."""
    try:
        settings = json.loads(settings_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(settings, dict):
        return None
    name = settings.get("name")
    if name is None or name == "":
        return settings_file.parent.name
    return name if isinstance(name, str) else None


def _maybe_it(unnamed: list[BrokenModel]) -> str:
    return "; these settings files cannot be read and may define it: " + "; ".join(
        broken.error for broken in unnamed
    )


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
