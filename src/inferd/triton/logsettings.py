"""Triton's logging extension: read and change the server's log level at run time.

``GET/POST /v2/logging`` and gRPC ``LogSettings`` speak Triton's fields. They map
onto the level of the root logger (request logs, model loads, errors, runtimes'
own logs) of the server process and of its worker processes (the data plane
hands the level to the pool, which keeps it for workers that start later):

- ``log_verbose_level`` > 0: DEBUG (request logs included);
- else ``log_info``: INFO; else ``log_warning``: WARNING; else ``log_error``: ERROR;
  all three off: nothing.

``log_format`` stays ``default`` (inferd's text or JSON format is chosen in the
settings) and ``log_file`` stays empty: a client may not pick a file for the
server to write. Asking for anything else is refused, and nothing changes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from inferd.errors import InvalidRequest

FLAGS = ("log_info", "log_warning", "log_error")
SETTINGS = ("log_file", *FLAGS, "log_verbose_level", "log_format")
DEFAULT_FORMAT = "default"
# Above CRITICAL: no record passes.
SILENT = logging.CRITICAL + 10


@dataclass(frozen=True, slots=True)
class SetLogLevel:
    """Give the processes running runtimes this root logger level, now and when they
    (re)start. A control message (workers.base.Control) for every process."""

    level: int

    def destination(self) -> None:
        return None

    def apply_in_worker(self, worker: object) -> None:
        logging.getLogger().setLevel(self.level)


def log_settings() -> dict[str, Any]:
    """The current settings, in Triton's fields."""
    level = logging.getLogger().getEffectiveLevel()
    return {
        "log_file": "",
        "log_info": level <= logging.INFO,
        "log_warning": level <= logging.WARNING,
        "log_error": level <= logging.ERROR,
        "log_verbose_level": 1 if level <= logging.DEBUG else 0,
        "log_format": DEFAULT_FORMAT,
    }


def update_log_settings(changes: dict[str, Any]) -> dict[str, Any]:
    """Apply ``changes`` (all of them or, when one is refused, none); the new settings."""
    wanted = log_settings()
    for key, value in changes.items():
        wanted[key] = _checked(key, value)
    logging.getLogger().setLevel(_level(wanted))
    return log_settings()


def _checked(key: str, value: Any) -> Any:
    if key in FLAGS:
        if not isinstance(value, bool):
            raise InvalidRequest(f"Log setting {key!r} must be true or false, not {value!r}")
        return value
    if key == "log_verbose_level":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidRequest(
                f"Log setting 'log_verbose_level' must be a whole number >= 0, not {value!r}"
            )
        return value
    if key == "log_format":
        if value != DEFAULT_FORMAT:
            raise InvalidRequest(
                f"Log setting 'log_format' {value!r} is not supported: inferd logs in its "
                "own format (text, or JSON with use_structured_logging); send 'default'"
            )
        return value
    if key == "log_file":
        if value != "":
            raise InvalidRequest(
                "Log setting 'log_file' is not supported: a client may not choose a file "
                "for the server to write; logs go where logging_settings sends them"
            )
        return value
    raise InvalidRequest(f"Unknown log setting {key!r}; the settings are: {', '.join(SETTINGS)}")


def _level(wanted: dict[str, Any]) -> int:
    if wanted["log_verbose_level"] > 0:
        return logging.DEBUG
    for flag, level in zip(FLAGS, (logging.INFO, logging.WARNING, logging.ERROR), strict=True):
        if wanted[flag]:
            return level
    return SILENT
