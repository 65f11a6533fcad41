"""Logging set-up from the server settings."""

from __future__ import annotations

import json
import logging
import logging.config
from pathlib import Path
from typing import Any

from .errors import ConfigurationError
from .settings import ServerSettings

FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"


class JSONFormatter(logging.Formatter):
    """One JSON object per line (``use_structured_logging``), for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(settings: ServerSettings) -> None:
    """Log to stderr at INFO (DEBUG with ``debug``), then apply ``logging_settings``.

    Raises ConfigurationError when ``logging_settings`` cannot be used.
    """
    level = logging.DEBUG if settings.debug else logging.INFO
    logging.basicConfig(level=level, format=FORMAT, force=True)
    if settings.use_structured_logging:
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JSONFormatter())
    # uvicorn's own loggers would otherwise print in their own format.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    if settings.logging_settings:
        config = _logging_dict(settings.logging_settings)
        try:
            logging.config.dictConfig(config)
        except (ValueError, TypeError, AttributeError, ImportError) as error:
            raise ConfigurationError(
                f"logging_settings: not a usable logging.config dictionary: {error}"
            ) from None


def _logging_dict(value: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    path = Path(value)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigurationError(f"logging_settings: cannot read {path}: {error}") from None
    try:
        loaded = _parse_yaml(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except ValueError as error:
        raise ConfigurationError(f"logging_settings: cannot parse {path}: {error}") from None
    if not isinstance(loaded, dict):
        raise ConfigurationError(f"logging_settings: {path} must hold a mapping (a dictionary)")
    return loaded


def _parse_yaml(text: str) -> Any:
    try:
        import yaml  # optional: only needed for YAML logging files
    except ImportError:
        raise ConfigurationError(
            "logging_settings: reading a YAML file needs PyYAML: pip install pyyaml"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(str(error)) from None
