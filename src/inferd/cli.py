"""The ``inferd`` command."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from .errors import ConfigurationError
from .logs import configure_logging
from .repository import ModelRepository
from .server.app import InferenceServer
from .settings import ServerSettings
from .settings_loader import load_server_settings
from .version import __version__
from .workers.inprocess import refuse_unstoppable


@click.group()
@click.version_option(__version__, prog_name="inferd")
def main() -> None:
    """inferd: serve machine-learning models over the Open Inference Protocol."""


@main.command()
@click.argument(
    "model_repository",
    default=".",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
def start(model_repository: Path) -> None:
    """Serve every model under MODEL_REPOSITORY (default: the current folder).

    Each folder below it holding a model-settings.json is a model; the server
    settings are read from MODEL_REPOSITORY/settings.json. Every setting can be
    overridden by an environment variable: INFERD_<NAME> or MLSERVER_<NAME> for
    server settings, INFERD_MODEL_<NAME> or MLSERVER_MODEL_<NAME> for models.
    """
    try:
        settings = load_server_settings(model_repository)
        configure_logging(settings)
        _check_repository(settings)
        _run(InferenceServer(settings))
    except ConfigurationError as error:
        raise click.ClickException(str(error)) from None


def _check_repository(settings: ServerSettings) -> None:
    """Refuse to start on a repository the server would only half serve.

    Runs before any port is opened. Files that break later only fail their own
    model's load (see the repository API).
    """
    repository = ModelRepository(Path(settings.model_repository_root))
    if settings.load_models_at_startup:
        # Raises on any invalid model-settings.json or duplicate.
        models = repository.find_all()
        if settings.parallel_workers == 0:
            for model in models:
                refuse_unstoppable(model)
    else:
        repository.scan()  # the folder must exist; files are read when a model is loaded


def _run(server: InferenceServer) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (no Windows build): asyncio works too
        asyncio.run(server.run())
    else:
        uvloop.run(server.run())


# ---- inferd infer: batch inference from a file (MLServer's `mlserver infer`) ----


@main.command()
@click.option(
    "--url",
    "-u",
    default="localhost:8080",
    envvar="MLSERVER_INFER_URL",
    show_default=True,
    help="The server's host:port (REST port, or gRPC port with --transport grpc).",
)
@click.option(
    "--model-name",
    "-m",
    required=True,
    envvar="MLSERVER_INFER_MODEL_NAME",
    help="Name of the model to send inference requests to.",
)
@click.option(
    "--input-data-path",
    "-i",
    required=True,
    envvar="MLSERVER_INFER_INPUT_DATA_PATH",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="File of V2 inference requests, one JSON object per line.",
)
@click.option(
    "--output-data-path",
    "-o",
    required=True,
    envvar="MLSERVER_INFER_OUTPUT_DATA_PATH",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="File the responses are written to, one JSON object per line.",
)
@click.option(
    "--workers",
    "-w",
    default=10,
    show_default=True,
    envvar="MLSERVER_INFER_WORKERS",
    type=click.IntRange(min=1),
    help="Requests in flight at once.",
)
@click.option(
    "--retries",
    "-r",
    default=3,
    show_default=True,
    envvar="MLSERVER_INFER_RETRIES",
    type=click.IntRange(min=1),
    help="Attempts per request when the server is overloaded (503/UNAVAILABLE).",
)
@click.option(
    "--batch-size",
    "-s",
    default=1,
    show_default=True,
    envvar="MLSERVER_INFER_BATCH_SIZE",
    type=click.IntRange(min=1),
    help="Send requests grouped as micro-batches (stacked on the first dimension).",
)
@click.option(
    "--binary-data",
    "-b",
    is_flag=True,
    envvar="MLSERVER_INFER_BINARY_DATA",
    help="Send REST inputs with the binary tensor extension.",
)
@click.option(
    "--transport",
    "-t",
    default="rest",
    show_default=True,
    envvar="MLSERVER_INFER_TRANSPORT",
    type=click.Choice(["rest", "grpc"]),
)
@click.option(
    "--request-headers",
    "-H",
    multiple=True,
    envvar="MLSERVER_INFER_REQUEST_HEADERS",
    help="Extra header (gRPC: metadata) as 'Name: value'; repeat for more.",
)
@click.option(
    "--timeout",
    default=60.0,
    show_default=True,
    envvar="MLSERVER_INFER_CONNECTION_TIMEOUT",
    type=float,
    help="Seconds to wait for one answer.",
)
@click.option(
    "--batch-interval",
    default=0.0,
    type=float,
    envvar="MLSERVER_INFER_BATCH_INTERVAL",
    help="Minimum seconds between the requests of each worker.",
)
@click.option(
    "--batch-jitter",
    default=0.0,
    type=float,
    envvar="MLSERVER_INFER_BATCH_JITTER",
    help="Maximum random seconds added to --batch-interval.",
)
@click.option("--use-ssl", is_flag=True, envvar="MLSERVER_INFER_USE_SSL", help="Use TLS.")
@click.option(
    "--insecure",
    is_flag=True,
    envvar="MLSERVER_INFER_INSECURE",
    help="Do not verify the server's certificate (REST). Use with caution.",
)
@click.option(
    "--preserve-order/--no-preserve-order",
    default=True,
    show_default=True,
    help="Write responses in input order, or as they complete (with batch_index).",
)
@click.option("--model-version", default="", help="Model version to send to.")
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    envvar="MLSERVER_INFER_VERBOSE",
    help="Log the settings and each retry.",
)
@click.option(
    "--extra-verbose",
    "-vv",
    is_flag=True,
    envvar="MLSERVER_INFER_EXTRA_VERBOSE",
    help="Also log every request's answer.",
)
def infer(**flags: object) -> None:
    """Send the V2 requests in a file to a V2 server and write the responses.

    Same flags and file formats as `mlserver infer`; works against inferd and
    any Open Inference Protocol server. Prints a summary: count, errors, throughput.
    """
    from .tools.cli_options import infer_options
    from .tools.infer import run_infer

    options = infer_options(flags)
    summary = run_infer(options)
    click.echo(summary.describe(), err=True)
    if summary.failed:
        raise SystemExit(1)
