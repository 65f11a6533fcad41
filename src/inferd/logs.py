"""Logging set-up from the server settings."""

from __future__ import annotations

import json
import logging
import logging.config
from pathlib import Path

from .errors import ConfigurationError
from .settings import ServerSettings

FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"


def configure_logging(settings: ServerSettings) -> None:
    level = logging.DEBUG if settings.debug else logging.INFO
    logging.basicConfig(level=level, format=FORMAT, force=True)
    # uvicorn's own loggers would otherwise print in their own format.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    if settings.logging_settings:
        logging.config.dictConfig(_logging_dict(settings.logging_settings))


def _logging_dict(value: str | dict) -> dict:
    if isinstance(value, dict):
        return value
    path = Path(value)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigurationError(f"logging_settings: cannot read {path}: {error}") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml  # optional: only needed for YAML logging files

        return dict(yaml.safe_load(text))
    try:
        return dict(json.loads(text))
    except ValueError as error:
        raise ConfigurationError(f"logging_settings: {path} is not JSON: {error}") from None
