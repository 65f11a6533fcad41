"""Click flag values -> the tools' option objects (kept out of cli.py, which only wires)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from inferd.tools.bench import BenchOptions, parse_steps
from inferd.tools.infer import InferOptions
from inferd.tools.tune import TuneOptions
from inferd.tools.v2client import header_pairs


def _verbosity(verbose: bool, extra_verbose: bool) -> None:
    level = logging.DEBUG if extra_verbose else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("inferd").setLevel(level)


def infer_options(flags: dict[str, Any]) -> InferOptions:
    _verbosity(bool(flags["verbose"]), bool(flags["extra_verbose"]))
    try:
        headers = header_pairs(flags["request_headers"])
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--request-headers") from None
    options = InferOptions(
        url=flags["url"],
        model_name=flags["model_name"],
        input_path=Path(flags["input_data_path"]),
        output_path=Path(flags["output_data_path"]),
        workers=flags["workers"],
        retries=flags["retries"],
        batch_size=flags["batch_size"],
        binary_data=flags["binary_data"],
        transport=flags["transport"],
        headers=headers,
        timeout_s=flags["timeout"],
        batch_interval_s=flags["batch_interval"],
        batch_jitter_s=flags["batch_jitter"],
        use_ssl=flags["use_ssl"],
        insecure=flags["insecure"],
        ordered=flags["preserve_order"],
        model_version=flags["model_version"],
    )
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
    extra = {"processes": flags["processes"]} if flags["processes"] else {}
    return BenchOptions(
        url=flags["url"],
        model_name=flags["model_name"],
        transport=flags["transport"],
        binary=flags["binary_data"],
        input_file=flags["input_data"],
        batch_size=flags["batch_size"],
        shapes=shapes,
        concurrency=concurrency,
        rates=rates,
        window_s=flags["measurement_interval"],
        stability=flags["stability_percentage"] / 100,
        max_windows=flags["max_trials"],
        **extra,
    )


def _numbers(text: str, kind: type[float] | type[int]) -> tuple[Any, ...]:
    return tuple(kind(part) for part in text.split(",") if part.strip())


def tune_options(repository: Path, flags: dict[str, Any]) -> TuneOptions:
    try:
        return TuneOptions(
            repository=repository,
            model_name=flags["model_name"],
            p99_ms=flags["p99_ms"],
            budget_s=flags["budget_s"],
            concurrency=parse_steps(flags["concurrency"]),
            workers=_numbers(flags["workers"], int),
            threads=_numbers(flags["threads"], int),
            batch_sizes=_numbers(flags["batch_sizes"], int),
            batch_times=_numbers(flags["batch_times"], float),
            batch_size=flags["batch_size"],
            window_s=flags["measurement_interval"],
            processes=flags["processes"],
        )
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
