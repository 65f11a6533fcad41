"""The tools' commands: ``inferd infer``, ``inferd bench`` and ``inferd tune``.

An option's value is stored under the name of the option object's field it fills
(tools/cli_options.py builds the objects), and its help is looked up by that name.
The tools themselves are imported when a command runs, so ``inferd start`` does
not pay for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

Command = TypeVar("Command", bound=Callable[..., Any])
AT_LEAST_ONE = click.IntRange(min=1)
IN_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
OUT_FILE = click.Path(dir_okay=False, writable=True, path_type=Path)
TRANSPORT = click.Choice(["rest", "grpc"])

INFER_HELP = {
    "url": "The server's host:port (REST port, or gRPC port with --transport grpc).",
    "model_name": "Name of the model to send inference requests to.",
    "input_path": "File of V2 inference requests, one JSON object per line.",
    "output_path": "File the responses are written to, one JSON object per line.",
    "workers": "Requests in flight at once.",
    "retries": "Attempts per request when the server is overloaded (503/UNAVAILABLE).",
    "batch_size": "Send requests grouped as micro-batches (stacked on the first dimension).",
    "binary_data": "Send REST inputs with the binary tensor extension.",
    "request_headers": "Extra header (gRPC: metadata) as 'Name: value'; repeat for more.",
    "timeout_s": "Seconds to wait for one answer.",
    "batch_interval_s": "Minimum seconds between the requests of each worker.",
    "batch_jitter_s": "Maximum random seconds added to --batch-interval.",
    "use_ssl": "Use TLS.",
    "insecure": "Do not verify the server's certificate (gRPC: trust the one it shows). "
    "Use with caution.",
    "ordered": "Write responses in input order, or as they complete (with batch_index).",
    "model_version": "Model version to send to.",
    "verbose": "Log the settings and each retry.",
    "extra_verbose": "Also log every request's answer.",
}
BENCH_HELP = {
    "url": "The server's host:port (gRPC port with --transport grpc).",
    "binary": "REST: binary tensor extension.",
    "input_file": "A V2 request (JSON; the first line of the file). Default: made "
    "from the model's metadata.",
    "batch_size": "Rows of a generated request (its -1 first dimension).",
    "shapes": "A generated input's shape as NAME:D1,D2 (repeat for more).",
    "concurrency": "Closed-loop steps: 8, 1,4,16 or a sweep start:end:x2 / start:end:+4.",
    "rates": "Open-loop steps in requests/s (same forms as --concurrency): "
    "requests go out on schedule, whatever the answers.",
    "window_s": "Seconds per measurement window.",
    "stability_percentage": "The last 3 windows' throughput and p99 must agree within this.",
    "max_windows": "Most windows per step.",
    "processes": "Load processes (default: half the cores).",
    "plot_path": "PNG of throughput against p99 latency (needs inferd[bench]).",
}
TUNE_HELP = {
    "model_name": "The model to tune.",
    "p99_ms": "Latency bound: p99 in milliseconds.",
    "budget_s": "Stop starting candidates once this many seconds would be passed.",
    "concurrency": "Load steps per candidate (stops at the first step past the bound).",
    "workers": "parallel_workers to try (default: 1..cores).",
    "threads": "threads_per_worker to try ('' for none).",
    "batch_sizes": "max_batch_size values to try ('' for none).",
    "batch_times": "max_batch_time values (seconds) to try with each batch size.",
    "batch_size": "Rows in each request of the load.",
    "processes": "Load processes.",
    "plot_path": "PNG of every candidate's throughput and p99 (needs inferd[bench]).",
}


def _name(declarations: Sequence[str]) -> str:
    """The name click stores the value under: the bare word, else the first long flag's."""
    for declaration in declarations:
        if declaration.isidentifier():
            return declaration
    return _flag_name(declarations)


def _flag_name(declarations: Sequence[str]) -> str:
    """The first long flag as a name: ``--preserve-order/--no-...`` -> preserve_order."""
    flag = next(item for item in declarations if item.startswith("--"))
    return flag.split("/")[0][2:].replace("-", "_")


def _option(helps: Mapping[str, str], *declarations: str, **attributes: Any) -> Any:
    return click.option(*declarations, help=helps.get(_name(declarations)), **attributes)


def _mlserver(*declarations: str, variable: str = "", **attributes: Any) -> Any:
    """An option of `mlserver infer`, also read from its MLSERVER_INFER_* variable
    (named after the flag unless ``variable`` says otherwise)."""
    envvar = "MLSERVER_INFER_" + (variable or _flag_name(declarations).upper())
    return _option(INFER_HELP, *declarations, envvar=envvar, **attributes)


def _options(*options: Any) -> Callable[[Command], Command]:
    """``options`` applied to a command, listed in its help in this order."""

    def apply(command: Command) -> Command:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def _bench(*declarations: str, **attributes: Any) -> Any:
    return _option(BENCH_HELP, *declarations, **attributes)


def _tune(*declarations: str, **attributes: Any) -> Any:
    return _option(TUNE_HELP, *declarations, **attributes)


@click.command()
@_options(
    _mlserver("--url", "-u", default="localhost:8080", show_default=True),
    _mlserver("--model-name", "-m", required=True),
    _mlserver("--input-data-path", "-i", "input_path", required=True, type=IN_FILE),
    _mlserver("--output-data-path", "-o", "output_path", required=True, type=OUT_FILE),
    _mlserver("--workers", "-w", default=10, show_default=True, type=AT_LEAST_ONE),
    _mlserver("--retries", "-r", default=3, show_default=True, type=AT_LEAST_ONE),
    _mlserver("--batch-size", "-s", default=1, show_default=True, type=AT_LEAST_ONE),
    _mlserver("--binary-data", "-b", is_flag=True),
    _mlserver("--transport", "-t", default="rest", show_default=True, type=TRANSPORT),
    _mlserver("--request-headers", "-H", multiple=True),
    _mlserver(
        "--timeout", "timeout_s", variable="CONNECTION_TIMEOUT", default=60.0, show_default=True
    ),
    _mlserver("--batch-interval", "batch_interval_s", default=0.0, type=float),
    _mlserver("--batch-jitter", "batch_jitter_s", default=0.0, type=float),
    _mlserver("--use-ssl", is_flag=True),
    _mlserver("--insecure", is_flag=True),
    _mlserver("--preserve-order/--no-preserve-order", "ordered", default=True, show_default=True),
    _mlserver("--model-version", default=""),
    _mlserver("--verbose", "-v", is_flag=True),
    _mlserver("--extra-verbose", "-vv", is_flag=True),
)
def infer(**flags: Any) -> None:
    """Send the V2 requests in a file to a V2 server and write the responses.

    Same flags and file formats as `mlserver infer`; works against inferd and
    any Open Inference Protocol server. Prints a summary: count, errors, throughput.
    """
    from inferd.tools.cli_options import infer_options
    from inferd.tools.infer import run_infer

    summary = run_infer(infer_options(flags))
    click.echo(summary.describe(), err=True)
    if summary.failed:
        raise SystemExit(1)


@click.command()
@_options(
    _bench("--url", "-u", default="localhost:8080", show_default=True),
    _bench("--model-name", "-m", required=True),
    _bench("--transport", "-t", default="rest", show_default=True, type=TRANSPORT),
    _bench("--binary-data", "-b", "binary", is_flag=True),
    _bench("--input-data", "-i", "input_file", type=click.Path(exists=True, dir_okay=False)),
    _bench("--batch-size", default=1, show_default=True, type=AT_LEAST_ONE),
    _bench("--shape", "shapes", multiple=True),
    _bench("--concurrency", "-c", "concurrency", default="1", show_default=True),
    _bench("--request-rate", "-r", "rates", default=""),
    _bench("--measurement-interval", "window_s", default=2.0, show_default=True),
    _bench("--stability-percentage", default=10.0, show_default=True, type=float),
    _bench("--max-trials", "max_windows", default=5, show_default=True, type=click.IntRange(3)),
    _bench("--processes", "-p", default=None, type=AT_LEAST_ONE),
    _bench("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path)),
    _bench("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path)),
    _bench("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path)),
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
        title = f"inferd bench: {options.model_name} ({options.transport})"
        plot(results, flags["plot_path"], title)


@click.command()
@click.argument("model_repository", type=click.Path(exists=True, file_okay=False, path_type=Path))
@_options(
    _tune("--model-name", "-m", required=True),
    _tune("--p99-ms", required=True, type=float),
    _tune("--budget-s", default=300.0, show_default=True, type=float),
    _tune("--concurrency", "-c", default="1:64:x2", show_default=True),
    _tune("--workers", default=""),
    _tune("--threads", default="2", show_default=True),
    _tune("--batch-sizes", default="8,32", show_default=True),
    _tune("--batch-times", default="0.001,0.005", show_default=True),
    _tune("--batch-size", default=1, show_default=True, type=AT_LEAST_ONE),
    _tune("--measurement-interval", "window_s", default=1.0, show_default=True, type=float),
    _tune("--processes", "-p", default=1, show_default=True, type=AT_LEAST_ONE),
    _tune("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path)),
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
