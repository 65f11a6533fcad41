"""Click flag values -> the tools' option objects (tools/commands.py names each flag's
value after the field it fills; what needs parsing is parsed here)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from inferd.tools.bench import BenchOptions, parse_steps
from inferd.tools.infer import InferOptions
from inferd.tools.tune import TuneOptions
from inferd.tools.v2client import header_pairs

# Flags that are not fields of the option objects.
_INFER_ONLY = ("request_headers", "verbose", "extra_verbose")
_BENCH_ONLY = ("csv_path", "json_path", "plot_path", "stability_percentage")


def _verbosity(verbose: bool, extra_verbose: bool) -> None:
    level = logging.DEBUG if extra_verbose else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("inferd").setLevel(level)


def _fields(flags: dict[str, Any], *left_out: str) -> dict[str, Any]:
    return {name: value for name, value in flags.items() if name not in left_out}


def infer_options(flags: dict[str, Any]) -> InferOptions:
    _verbosity(bool(flags["verbose"]), bool(flags["extra_verbose"]))
    try:
        headers = header_pairs(flags["request_headers"])
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--request-headers") from None
    options = InferOptions(**_fields(flags, *_INFER_ONLY), headers=headers)
    logging.getLogger("inferd.infer").info("inferd infer: %s", options)
    return options


def bench_options(flags: dict[str, Any]) -> BenchOptions:
    try:
        concurrency = parse_steps(flags["concurrency"])
        rates = tuple(float(rate) for rate in parse_steps(flags["rates"])) if flags["rates"] else ()
        shapes = {}
        for item in flags["shapes"]:
            name, _, dims = item.partition(":")
            shapes[name] = [int(dim) for dim in dims.split(",")]
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    fields = _fields(flags, *_BENCH_ONLY) | {
        "concurrency": concurrency,
        "rates": rates,
        "shapes": shapes,
        "stability": flags["stability_percentage"] / 100,
    }
    if fields["processes"] is None:  # BenchOptions' default: half the cores
        del fields["processes"]
    return BenchOptions(**fields)


def _numbers(text: str, kind: type[float] | type[int]) -> tuple[Any, ...]:
    return tuple(kind(part) for part in text.split(",") if part.strip())


def tune_options(repository: Path, flags: dict[str, Any]) -> TuneOptions:
    try:
        steps = {
            "concurrency": parse_steps(flags["concurrency"]),
            "workers": _numbers(flags["workers"], int),
            "threads": _numbers(flags["threads"], int),
            "batch_sizes": _numbers(flags["batch_sizes"], int),
            "batch_times": _numbers(flags["batch_times"], float),
        }
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    return TuneOptions(repository=repository, **(_fields(flags, "plot_path") | steps))
