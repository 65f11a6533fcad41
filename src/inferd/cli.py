"""The ``inferd`` command."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click

from inferd.errors import ConfigurationError
from inferd.observability.logs import configure_logging
from inferd.server.app import InferenceServer
from inferd.server.shutdown import exit_stopped
from inferd.serving.repository import ModelRepository
from inferd.settings import ModelSettings, ServerSettings
from inferd.settings.loader import default_models_dir, load_server_settings
from inferd.supervisor.main import Supervisor, run_supervisor
from inferd.supervisor.placement import serving_layout
from inferd.supervisor.services import SUPERVISOR_SERVICES
from inferd.tools.commands import bench, infer, tune
from inferd.version import __version__
from inferd.workers.environments import refuse_in_process_environment
from inferd.workers.inprocess import refuse_unstoppable

logger = logging.getLogger(__name__)


@click.group()
@click.version_option(__version__, prog_name="inferd")
def main() -> None:
    """inferd: serve machine-learning models over the Open Inference Protocol."""


@main.command()
@click.argument(
    "model_repository",
    required=False,
    type=click.Path(file_okay=False, path_type=Path),
)
def start(model_repository: Path | None) -> None:
    """Serve every model under MODEL_REPOSITORY (default: $INFERD_MODELS_DIR or
    $MLSERVER_MODELS_DIR when set, as in inferd's image, else the current folder).

    Each folder below it holding a model-settings.json is a model; the server
    settings are read from MODEL_REPOSITORY/settings.json. Every setting can be
    overridden by an environment variable: INFERD_<NAME> or MLSERVER_<NAME> for
    server settings, INFERD_MODEL_<NAME> or MLSERVER_MODEL_<NAME> for models.
    """
    repository = model_repository or default_models_dir()
    try:
        settings = load_server_settings(repository)
        configure_logging(settings)
        startup_models = _check_repository(settings)
        count, host = serving_layout(settings, startup_models)
        if count == 1:
            _run(InferenceServer(settings))
            status = 0
        else:
            supervisor = Supervisor(settings, repository, count, SUPERVISOR_SERVICES, host)
            # Not 0 when a protocol process did not drain by its deadline.
            status = run_supervisor(supervisor)
    except ConfigurationError as error:
        raise click.ClickException(str(error)) from None
    exit_stopped(status)


def _check_repository(settings: ServerSettings) -> list[ModelSettings]:
    """Refuse to start on a repository the server would only half serve; the models
    it loads at start-up.

    Runs before any port is opened. Files that break later only fail their own
    model's load (see the repository API).
    """
    repository = ModelRepository(
        Path(settings.model_repository_root), loaded_later=not settings.load_models_at_startup
    )
    if settings.load_models_at_startup:
        # Raises on any invalid model-settings.json or duplicate.
        models = repository.find_all()
        if settings.parallel_workers == 0:
            for model in models:
                refuse_unstoppable(model)
                refuse_in_process_environment(model)
        return models
    # Files are read when a model is loaded; the folder may not exist yet (ModelMesh).
    if not repository.root.exists():
        logger.warning(
            "Model repository %s does not exist yet: serving no models until they are "
            "loaded into it through the repository API",
            repository.root,
        )
    repository.scan()
    return []


def _run(server: InferenceServer) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (no Windows build): asyncio works too
        asyncio.run(server.run())
    else:
        uvloop.run(server.run())


# The client tools (inferd/tools/commands.py): batch inference from a file (MLServer's
# `mlserver infer`), a load generator for V2 servers, and a settings tuner.
for _command in (infer, bench, tune):
    main.add_command(_command)
