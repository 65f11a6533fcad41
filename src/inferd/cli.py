"""The ``inferd`` command."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from inferd.errors import ConfigurationError
from inferd.host.placement import serving_layout
from inferd.observability.logs import configure_logging, speak_for_server
from inferd.server.app import InferenceServer
from inferd.server.shutdown import exit_stopped
from inferd.serving.repository import ModelRepository
from inferd.settings import ModelSettings, ServerSettings
from inferd.settings.command_line import CommandLine, CommandLineError, option_name
from inferd.settings.loader import load_server_settings
from inferd.settings.sources import Source, folder_source, setting_sources
from inferd.settings.sources import as_json as sources_json
from inferd.settings.sources import as_table as sources_table
from inferd.supervisor.main import Supervisor, run_supervisor
from inferd.supervisor.services import SUPERVISOR_SERVICES
from inferd.tools.commands import bench, infer, tune
from inferd.version import __version__
from inferd.workers import oom_score
from inferd.workers.environments import refuse_in_process_environment
from inferd.workers.inprocess import refuse_unstoppable

logger = logging.getLogger(__name__)


@click.group()
@click.version_option(__version__, prog_name="inferd")
def main() -> None:
    """inferd: serve machine-learning models over the Open Inference Protocol."""


PRECEDENCE = (
    "Each setting is taken from, first found: its flag; the environment "
    "(INFERD_<NAME>, then MLSERVER_<NAME>); settings.json; the default."
)

# The settings people change most, as flags of `start` and `settings`:
# (setting, metavar, what it is). A flag is named after its setting (option_name).
FLAGS = (
    ("http_port", "PORT", "Port of the REST server."),
    ("grpc_port", "PORT", "Port of the gRPC server."),
    ("metrics_port", "PORT", "Port of the Prometheus metrics server."),
    ("host", "ADDRESS", "Address the REST, gRPC and metrics servers listen on."),
    (
        "parallel_workers",
        "N",
        "Worker processes that run inference; 0 runs it in the serving process; "
        "cpu_count: the CPUs this process may use.",
    ),
    (
        "protocol_processes",
        "N",
        "Processes that take requests on the same ports; cpu_count: the CPUs this process may use.",
    ),
    ("log_level", "LEVEL", "debug, info, warning, error or critical, for every process."),
)


def _flag_help(name: str, text: str) -> str:
    field = ServerSettings.model_fields[name]
    if field.default_factory is not None:
        default = "the CPUs this process may use"
    elif name == "log_level":
        default = "info, or debug with debug: true"
    else:
        default = str(field.default)
    return f"{text} [setting {name}, INFERD_{name.upper()}; default: {default}]"


Command = TypeVar("Command", bound=Callable[..., Any])


def settings_options(command: Command) -> Command:
    """MODEL_REPOSITORY and the flags that give settings, shared by start and settings."""
    # click lists options in the reverse order of their application.
    for name, metavar, text in reversed(FLAGS):
        flag = click.option(option_name(name), name, metavar=metavar, help=_flag_help(name, text))
        command = flag(command)
    command = click.option(
        "--settings",
        "settings_file",
        metavar="FILE",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Read the server settings from FILE instead of MODEL_REPOSITORY/settings.json "
        "(its relative paths start from its folder).",
    )(command)
    command = click.option(
        "--model-repository",
        "repository_flag",
        metavar="FOLDER",
        type=click.Path(file_okay=False, path_type=Path),
        help="The folder served: the same as MODEL_REPOSITORY.",
    )(command)
    folder = click.argument(
        "model_repository", required=False, type=click.Path(file_okay=False, path_type=Path)
    )
    return folder(command)


@main.command(epilog=PRECEDENCE)
@settings_options
def start(
    model_repository: Path | None,
    repository_flag: Path | None,
    settings_file: Path | None,
    **flags: str | None,
) -> None:
    """Serve every model under MODEL_REPOSITORY (default: $INFERD_MODELS_DIR or
    $MLSERVER_MODELS_DIR when set, as in inferd's image, else the current folder).

    Each folder below it holding a model-settings.json is a model; the server
    settings are read from MODEL_REPOSITORY/settings.json (or --settings FILE).
    Every setting can be overridden by an environment variable: INFERD_<NAME> or
    MLSERVER_<NAME> for server settings, INFERD_MODEL_<NAME> or MLSERVER_MODEL_<NAME>
    for models; the flags below win over both. See `inferd settings` for the values
    and where each came from.
    """
    repository, _, command_line = _given(model_repository, repository_flag, settings_file, flags)
    oom_score.mark_base()  # every process of the server scores above it (workers/oom_score.py)
    try:
        settings = _load(repository, command_line)
        configure_logging(settings)
        startup_models = _check_repository(settings)
        layout = serving_layout(settings, startup_models)
        if layout.processes == 1:
            _run(InferenceServer(settings))
            status = 0
        else:
            command_line.export()  # the processes the supervisor starts read it
            layout.placement.export()  # decided once, here: they read it, not the rules
            speak_for_server(True)  # its services' uvicorn lines are detail too
            supervisor = Supervisor(settings, repository, layout, SUPERVISOR_SERVICES)
            # Not 0 when a protocol process did not drain by its deadline.
            status = run_supervisor(supervisor)
    except ConfigurationError as error:
        raise click.ClickException(str(error)) from None
    exit_stopped(status)


@main.command("settings", epilog=PRECEDENCE)
@settings_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON, for programs.")
def show_settings(
    model_repository: Path | None,
    repository_flag: Path | None,
    settings_file: Path | None,
    as_json: bool,
    **flags: str | None,
) -> None:
    """Print the server settings `inferd start` would run with (the same arguments
    and flags), and where each value came from: a flag, an environment variable, the
    settings file or the default."""
    given = _given(model_repository, repository_flag, settings_file, flags)
    repository, folder_given, command_line = given
    try:
        settings = _load(repository, command_line)
        sources = setting_sources(repository, folder_given, command_line)
    except ConfigurationError as error:
        raise click.ClickException(str(error)) from None
    click.echo(sources_json(settings, sources) if as_json else sources_table(settings, sources))


def _given(
    argument: Path | None,
    flag: Path | None,
    settings_file: Path | None,
    flags: dict[str, str | None],
) -> tuple[Path, Source, CommandLine]:
    """The folder served, how it was named, and the command line's settings."""
    if argument is not None and flag is not None and argument.resolve() != flag.resolve():
        raise click.UsageError(
            f"MODEL_REPOSITORY ({argument}) and --model-repository ({flag}) name "
            "different folders: give one of them"
        )
    folder, folder_given = folder_source(argument, flag)
    values = {name: value for name, value in flags.items() if value is not None}
    return folder, folder_given, CommandLine(settings_file and settings_file.resolve(), values)


def _load(repository: Path, command_line: CommandLine) -> ServerSettings:
    """The settings; a flag's refused value is a usage error (exit status 2)."""
    try:
        return load_server_settings(repository, command_line=command_line)
    except CommandLineError as error:
        raise click.UsageError(str(error)) from None


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
