"""The ``inferd`` command."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import click

from inferd.errors import ConfigurationError
from inferd.observability.logs import configure_logging
from inferd.server.app import InferenceServer
from inferd.serving.repository import ModelRepository
from inferd.settings import ServerSettings
from inferd.settings.loader import default_models_dir, load_server_settings
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
    try:
        settings = load_server_settings(model_repository or default_models_dir())
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
    else:
        # Files are read when a model is loaded; the folder may not exist yet (ModelMesh).
        if not repository.root.exists():
            logger.warning(
                "Model repository %s does not exist yet: serving no models until they are "
                "loaded into it through the repository API",
                repository.root,
            )
        repository.scan()


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
    help="Do not verify the server's certificate (gRPC: trust the one it shows). Use with caution.",
)
@click.option(
    "--preserve-order/--no-preserve-order",
    default=True,
    show_default=True,
    envvar="MLSERVER_INFER_PRESERVE_ORDER",
    help="Write responses in input order, or as they complete (with batch_index).",
)
@click.option(
    "--model-version",
    default="",
    envvar="MLSERVER_INFER_MODEL_VERSION",
    help="Model version to send to.",
)
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
    from inferd.tools.cli_options import infer_options
    from inferd.tools.infer import run_infer

    options = infer_options(flags)
    summary = run_infer(options)
    click.echo(summary.describe(), err=True)
    if summary.failed:
        raise SystemExit(1)


# ---- inferd bench: a load generator for V2 servers (perf_analyzer's ideas) ----


@main.command()
@click.option(
    "--url",
    "-u",
    default="localhost:8080",
    show_default=True,
    help="The server's host:port (gRPC port with --transport grpc).",
)
@click.option("--model-name", "-m", required=True)
@click.option(
    "--transport", "-t", default="rest", show_default=True, type=click.Choice(["rest", "grpc"])
)
@click.option("--binary-data", "-b", is_flag=True, help="REST: binary tensor extension.")
@click.option(
    "--input-data",
    "-i",
    type=click.Path(exists=True, dir_okay=False),
    help="A V2 request (JSON; the first line of the file). Default: made "
    "from the model's metadata.",
)
@click.option(
    "--batch-size",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows of a generated request (its -1 first dimension).",
)
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    help="A generated input's shape as NAME:D1,D2 (repeat for more).",
)
@click.option(
    "--concurrency",
    "-c",
    "concurrency",
    default="1",
    show_default=True,
    help="Closed-loop steps: 8, 1,4,16 or a sweep start:end:x2 / start:end:+4.",
)
@click.option(
    "--request-rate",
    "-r",
    "rates",
    default="",
    help="Open-loop steps in requests/s (same forms as --concurrency): "
    "requests go out on schedule, whatever the answers.",
)
@click.option(
    "--measurement-interval",
    default=2.0,
    show_default=True,
    type=float,
    help="Seconds per measurement window.",
)
@click.option(
    "--stability-percentage",
    default=10.0,
    show_default=True,
    type=float,
    help="The last 3 windows' throughput and p99 must agree within this.",
)
@click.option(
    "--max-trials",
    default=5,
    show_default=True,
    type=click.IntRange(min=3),
    help="Most windows per step.",
)
@click.option(
    "--processes",
    "-p",
    default=None,
    type=click.IntRange(min=1),
    help="Load processes (default: half the cores).",
)
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="PNG of throughput against p99 latency (needs inferd[bench]).",
)
def bench(**flags: Any) -> None:
    """Measure a V2 server's throughput and latency under load, step by step."""
    from inferd.tools.bench import run_bench
    from inferd.tools.benchreport import plot, table, write_csv, write_json
    from inferd.tools.cli_options import bench_options

    options = bench_options(flags)
    try:
        results = run_bench(options, progress=lambda line: click.echo(line, err=True))
    except (OSError, ValueError) as error:  # no server, an unknown model, a bad request file
        raise click.ClickException(f"inferd bench: {error}") from None
    click.echo(table(results))
    if flags["csv_path"]:
        write_csv(results, flags["csv_path"])
    if flags["json_path"]:
        write_json(results, flags["json_path"])
    if flags["plot_path"]:
        plot(
            results, flags["plot_path"], f"inferd bench: {options.model_name} ({options.transport})"
        )


# ---- inferd tune: find the fastest settings for a model under a p99 bound ----


@main.command()
@click.argument("model_repository", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--model-name", "-m", required=True, help="The model to tune.")
@click.option("--p99-ms", required=True, type=float, help="Latency bound: p99 in milliseconds.")
@click.option(
    "--budget-s",
    default=300.0,
    show_default=True,
    type=float,
    help="Stop starting candidates once this many seconds would be passed.",
)
@click.option(
    "--concurrency",
    "-c",
    default="1:64:x2",
    show_default=True,
    help="Load steps per candidate (stops at the first step past the bound).",
)
@click.option("--workers", default="", help="parallel_workers to try (default: 1..cores).")
@click.option(
    "--threads", default="2", show_default=True, help="threads_per_worker to try ('' for none)."
)
@click.option(
    "--batch-sizes",
    default="8,32",
    show_default=True,
    help="max_batch_size values to try ('' for none).",
)
@click.option(
    "--batch-times",
    default="0.001,0.005",
    show_default=True,
    help="max_batch_time values (seconds) to try with each batch size.",
)
@click.option(
    "--batch-size",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows in each request of the load.",
)
@click.option("--measurement-interval", default=1.0, show_default=True, type=float)
@click.option(
    "--processes",
    "-p",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Load processes.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="PNG of every candidate's throughput and p99 (needs inferd[bench]).",
)
def tune(model_repository: Path, **flags: Any) -> None:
    """Try settings for one model of MODEL_REPOSITORY and report the fastest under --p99-ms.

    Measures the defaults, then parallel_workers, threads_per_worker and adaptive
    batching (max_batch_size, max_batch_time), each phase from the best so far,
    and prints a table and the settings.json / model-settings.json to use.
    """
    from inferd.tools.cli_options import tune_options
    from inferd.tools.tune import report_text, run_tune

    options = tune_options(model_repository, flags)
    report = run_tune(options, progress=lambda line: click.echo(line, err=True))
    click.echo(report_text(report, options.p99_ms))
    if flags["plot_path"]:
        from inferd.tools.tuneplot import plot_candidates

        plot_candidates(report, flags["plot_path"])
