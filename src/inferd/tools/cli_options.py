"""Click flag values -> the tools' option objects (kept out of cli.py, which only wires)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from .infer import InferOptions
from .v2client import header_pairs


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
