"""Logging set-up from the server settings."""

from __future__ import annotations

import json
import logging
import logging.config
from pathlib import Path
from typing import Any

from inferd.errors import ConfigurationError
from inferd.settings import ServerSettings

FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"
ACCESS_LOGGER = "uvicorn.access"
# uvicorn's own lines of each of a process's servers (started, shutting down, finished).
UVICORN_LOGGER = "uvicorn.error"
# The ``extra`` of a line that tells one of the server's events (a model loading, loaded,
# unloading, unloaded; a public port listening; ready; stopping). A server of several
# processes tells each once: the process that speaks for it (``speak_for_server``) at
# the line's level, the others at DEBUG, as detail of each process.
SERVER_EVENT = {"server_event": True}
# What every LogRecord carries; anything else was passed as ``extra`` and becomes a
# field of its own in JSON logs (e.g. model_name and duration_ms in request logs).
_RECORD_ATTRIBUTES = frozenset(
    (*vars(logging.LogRecord("", 0, "", 0, "", (), None)), "message", "asctime", "taskName")
) | {"_shown"}  # _ServerEventsAsDetail's note on the record
# uvicorn's access log arguments, as fields of JSON logs.
_ACCESS_FIELDS = ("client", "method", "path", "http_version", "status_code")


class JSONFormatter(logging.Formatter):
    """One JSON object per line (``use_structured_logging``), for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES:
                entry[key] = value
        if record.name == ACCESS_LOGGER and isinstance(record.args, tuple):
            entry.update(zip(_ACCESS_FIELDS, record.args, strict=False))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class _SkipScrapes(logging.Filter):
    """Keeps Prometheus scrapes of the metrics endpoint out of the access log
    (uvicorn has one access logger for all its servers)."""

    def __init__(self, endpoint: str) -> None:
        super().__init__()
        self.endpoint = "/" + endpoint.strip("/")

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (isinstance(args, tuple) and len(args) > 2 and args[2] == self.endpoint)


def configure_logging(settings: ServerSettings) -> None:
    """Log to stderr at the settings' level (``log_level``, else DEBUG with ``debug``,
    else INFO), then apply ``logging_settings``.

    Raises ConfigurationError when ``logging_settings`` cannot be used.
    """
    logging.basicConfig(level=settings.logging_level, format=FORMAT, force=True)
    if settings.use_structured_logging:
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JSONFormatter())
    # uvicorn's own loggers would otherwise print in their own format.
    for name in ("uvicorn", "uvicorn.error", ACCESS_LOGGER):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    access = logging.getLogger(ACCESS_LOGGER)
    for old in [f for f in access.filters if isinstance(f, _SkipScrapes)]:
        access.removeFilter(old)
    if settings.metrics_endpoint:
        access.addFilter(_SkipScrapes(settings.metrics_endpoint))
    if settings.logging_settings:
        config = _logging_dict(settings.logging_settings)
        try:
            logging.config.dictConfig(config)
        except (ValueError, TypeError, AttributeError, ImportError) as error:
            raise ConfigurationError(
                f"logging_settings: not a usable logging.config dictionary: {error}"
            ) from None


class _Tag(logging.Filter):
    """Sets one attribute on every record a handler writes."""

    def __init__(self, name: str, value: object) -> None:
        super().__init__()
        self.name_value = (name, value)

    def filter(self, record: logging.LogRecord) -> bool:
        setattr(record, *self.name_value)
        return True


def tag_process(name: str, value: int) -> None:
    """Mark every line this process logs from now on with ``name`` = ``value``: a
    field of JSON logs, and ``[name value]`` in front of the logger's name in the
    text format. A supervisor's protocol processes share its stderr: the tag says
    which one wrote a line."""
    tagged_format = FORMAT.replace("[%(name)s]", f"[{name} {value}] [%(name)s]")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Tag(name.replace(" ", "_"), value))
        formatter = handler.formatter
        if formatter is not None and getattr(formatter, "_fmt", None) == FORMAT:
            handler.setFormatter(logging.Formatter(tagged_format))


class _ServerEventsAsDetail(logging.Filter):
    """In one process of a server of several: lowers to DEBUG the INFO lines that are
    its own detail (uvicorn's, of each of its servers) and, unless it speaks for the
    server, the server's events, which one process tells."""

    def __init__(self, speaks: bool) -> None:
        super().__init__()
        self.speaks = speaks

    def filter(self, record: logging.LogRecord) -> bool:
        shown = getattr(record, "_shown", None)  # decided by another handler already
        if shown is not None:
            return bool(shown)
        detail = record.levelno == logging.INFO and (
            record.name == UVICORN_LOGGER
            or (not self.speaks and getattr(record, "server_event", False))
        )
        shown = True
        if detail:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            shown = logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        record._shown = shown
        return shown


# The filters of a speaker that speaks once it is ready (speak_for_server's once_ready).
_SPEAKERS_ONCE_READY: list[_ServerEventsAsDetail] = []


def speak_for_server(speaks: bool, once_ready: bool = False) -> None:
    """This process is one of a server's several: whether it tells the server's events
    (one does; :data:`SERVER_EVENT`). Every process's own detail goes to DEBUG.

    ``once_ready``: it speaks only from :func:`now_ready` on. The speaker restarted
    after a death: its own start (loading, catching up, listening, ready) is detail,
    for the server served all along, and the supervisor tells that it is back."""
    for handler in logging.getLogger().handlers:
        speaker = _ServerEventsAsDetail(speaks and not once_ready)
        handler.addFilter(speaker)
        if speaks and once_ready:
            _SPEAKERS_ONCE_READY.append(speaker)


def now_ready() -> None:
    """This process is ready: a speaker held back until then speaks from now on."""
    for speaker in _SPEAKERS_ONCE_READY:
        speaker.speaks = True
    _SPEAKERS_ONCE_READY.clear()


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
