"""Per-model Python environments (``parameters.environment_path`` and
``parameters.environment_tarball`` in model-settings.json, as in MLServer).

A model with an environment runs in worker processes started with that
environment's interpreter (``<env>/bin/python``), so its libraries are the
environment's, not the server's. Those workers import inferd itself from a folder
holding only a link to the running server's ``inferd`` package (put on their
``PYTHONPATH``), so nothing else of the server's installation leaks in; the
environment brings what inferd's worker side imports (see
:data:`WORKER_REQUIREMENTS`) and the model's own libraries.

A tarball (conda-pack or venv-pack) is unpacked once into ``environments_dir``,
under the SHA-256 of its bytes, and reused by every model and restart that names
the same tarball. Unpacking refuses members that would land outside that folder
(absolute paths, ``..``, links followed out of it); it unpacks into a temporary
folder renamed into place, so a half-unpacked environment is never used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from inferd.errors import ConfigurationError
from inferd.settings import ModelSettings

# What inferd's worker side imports besides the standard library (and inferd).
WORKER_REQUIREMENTS = "numpy, ml-dtypes, pydantic>=2.5 and pydantic-settings"
# MLServer's default: the .envs folder of the working directory.
DEFAULT_ENVIRONMENTS_DIR = ".envs"


def environment_of(settings: ModelSettings, environments_dir: str | None) -> Path | None:
    """The environment the model's workers run in (unpacking its tarball if need be);
    None: the server's own. ConfigurationError when it is unusable."""
    parameters = settings.parameters
    if parameters is None:
        return None
    if parameters.environment_path and parameters.environment_tarball:
        raise ConfigurationError(
            f"{_where(settings)}{settings.label} sets both parameters.environment_path and "
            "parameters.environment_tarball; set one of them"
        )
    if parameters.environment_path:
        # As in MLServer: ~ and $VARS expanded, relative to the working directory.
        path = Path(os.path.expandvars(os.path.expanduser(parameters.environment_path)))
        return _checked(settings, path.absolute(), "parameters.environment_path")
    if parameters.environment_tarball:
        tarball = Path(parameters.environment_tarball)
        if not tarball.is_absolute():  # as in MLServer: relative to the model's folder
            tarball = settings.folder / tarball
        folder = Path(environments_dir or DEFAULT_ENVIRONMENTS_DIR).absolute()
        unpacked = unpack_tarball(settings, tarball, folder)
        return _checked(settings, unpacked, "parameters.environment_tarball")
    return None


def interpreter_of(environment: Path) -> Path:
    return environment / "bin" / "python"


def _checked(settings: ModelSettings, environment: Path, setting: str) -> Path:
    if not os.access(interpreter_of(environment), os.X_OK):
        raise ConfigurationError(
            f"{_where(settings)}{settings.label}: {setting} names {environment}, which has no "
            "bin/python to run; give a Python environment (a venv or conda environment)"
        )
    return environment


def unpack_tarball(settings: ModelSettings, tarball: Path, environments_dir: Path) -> Path:
    """The folder the tarball is unpacked in (done now unless it was before)."""
    try:
        digest = _sha256(tarball)
    except OSError as error:
        raise ConfigurationError(
            f"{_where(settings)}{settings.label}: cannot read parameters.environment_tarball "
            f"{tarball}: {error.strerror or error}"
        ) from None
    target = environments_dir / digest
    if target.is_dir():
        return target
    environments_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=environments_dir))
    try:
        with tarfile.open(tarball, "r:*") as archive:
            # "tar", not "data": venv-pack keeps bin/python as a link to an absolute
            # path. Still refused: members outside the folder, and writes through links.
            archive.extractall(staging, filter="tar")
        staging.rename(target)
    except (tarfile.TarError, OSError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        if target.is_dir():  # another server unpacked it meanwhile
            return target
        raise ConfigurationError(
            f"{_where(settings)}{settings.label}: cannot unpack parameters.environment_tarball "
            f"{tarball}: {error}"
        ) from None
    return target


def _sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def refuse_in_process_environment(settings: ModelSettings) -> None:
    """ConfigurationError for a model with its own environment under parallel_workers: 0."""
    parameters = settings.parameters
    if parameters and (parameters.environment_path or parameters.environment_tarball):
        setting = "environment_path" if parameters.environment_path else "environment_tarball"
        raise ConfigurationError(
            f"{_where(settings)}{settings.label} sets parameters.{setting}, which needs worker "
            "processes: with parallel_workers: 0 the model would run in the server's own "
            "process and Python environment. Set parallel_workers to 1 or more, or remove "
            f"parameters.{setting}."
        )


def _where(settings: ModelSettings) -> str:
    return f"{settings.source}: " if settings.source else ""


class WorkerImportPath:
    """A folder holding only a link to the running ``inferd`` package: the
    ``PYTHONPATH`` of workers that run in a model's environment."""

    def __init__(self) -> None:
        self._folder: Path | None = None

    def folder(self) -> Path:
        if self._folder is None:
            package = Path(__file__).resolve().parent.parent
            self._folder = Path(tempfile.mkdtemp(prefix="inferd-worker-path-"))
            (self._folder / "inferd").symlink_to(package, target_is_directory=True)
        return self._folder

    def remove(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


@dataclass(frozen=True, slots=True)
class WorkerEnvironment:
    """How a worker process is started in a model's environment."""

    root: Path  # the environment
    import_path: Path  # WorkerImportPath.folder(): where the worker finds inferd

    @property
    def python(self) -> str:
        return str(interpreter_of(self.root))

    def process_environment(self) -> dict[str, str]:
        """The worker's environment variables: the server's, with inferd alone on
        PYTHONPATH (not the server's import path) and the environment's bin first on
        PATH (as activating it would)."""
        variables = dict(os.environ)
        variables["PYTHONPATH"] = str(self.import_path)
        path = variables.get("PATH", "")
        variables["PATH"] = os.pathsep.join(filter(None, [str(self.root / "bin"), path]))
        variables.pop("PYTHONHOME", None)
        return variables
