"""Server and model settings: their fields, defaults and validation.

The names and defaults follow MLServer's ``settings.json`` and
``model-settings.json`` so an MLServer deployment is served unchanged. Each value
comes from, in order of precedence: the environment (``INFERD_<NAME>``, then
MLServer's ``MLSERVER_<NAME>``; ``INFERD_MODEL_<NAME>`` / ``MLSERVER_MODEL_<NAME>``
for model settings), then the settings file, then the default. Reading the
files and turning validation errors into messages is in :mod:`inferd.settings_loader`;
these two modules are the only ones that read env vars and settings files.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from .datatypes import DATATYPES
from .version import __version__

logger = logging.getLogger(__name__)

SERVER_SETTINGS_FILE = "settings.json"
MODEL_SETTINGS_FILE = "model-settings.json"


class _EnvFirstSettings(BaseSettings):
    """Settings read, in precedence order, from ``INFERD_<prefix>*`` env vars,
    ``MLSERVER_<prefix>*`` env vars, then the file (passed as init arguments)."""

    env_infix: ClassVar[str] = ""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        prefix = cls.env_infix
        return (
            EnvSettingsSource(settings_cls, env_prefix=f"INFERD_{prefix}", case_sensitive=False),
            EnvSettingsSource(settings_cls, env_prefix=f"MLSERVER_{prefix}", case_sensitive=False),
            init_settings,
        )


class CORSSettings(BaseModel):
    """Cross-origin resource sharing, as MLServer's ``cors_settings``."""

    model_config = ConfigDict(extra="forbid")

    allow_origins: list[str] = []
    """Origins allowed to make cross-origin requests; ``["*"]`` allows any."""
    allow_origin_regex: str | None = None
    """A regex matched against the origin, e.g. ``https://.*\\.example\\.org``."""
    allow_credentials: bool = False
    """Whether cookies are supported on cross-origin requests."""
    allow_methods: list[str] = ["GET"]
    """HTTP methods allowed on cross-origin requests."""
    allow_headers: list[str] = []
    """Request headers allowed on cross-origin requests."""
    expose_headers: list[str] = []
    """Response headers the browser may read."""
    max_age: int = 600
    """How long browsers may cache a preflight answer, in seconds."""


class ServerSettings(_EnvFirstSettings):
    """Server-wide settings (``settings.json``)."""

    model_config = SettingsConfigDict(extra="forbid", validate_default=True)

    debug: bool = False
    """Log at debug level (one line per request)."""

    parallel_workers: int = 1
    """Worker processes that run inference; 0 runs it in the main process.
    ``"cpu_count"`` means the number of cores this process may use."""

    parallel_workers_timeout: int = 5
    """Seconds to wait for a worker process to stop before it is killed."""

    model_repository_root: str = "."
    """Folder searched (recursively) for ``model-settings.json`` files."""

    load_models_at_startup: bool = True
    """Load every model found in the repository when the server starts."""

    server_name: str = "inferd"
    """Name reported by server metadata (``GET /v2``)."""

    server_version: str = __version__
    """Version reported by server metadata."""

    extensions: list[str] = []
    """Extra protocol extensions to report in server metadata."""

    host: str = "0.0.0.0"
    """Address the REST, gRPC and metrics servers listen on."""

    http_port: int = 8080
    """Port of the REST server."""

    root_path: str = ""
    """ASGI root path, for a server mounted below a URL prefix by a proxy."""

    grpc_port: int = 8081
    """Port of the gRPC server."""

    grpc_max_message_length: int | None = None
    """Largest gRPC message accepted or sent, in bytes (default: max_request_size)."""

    cors_settings: CORSSettings | None = None
    """CORS for the REST server; no CORS headers when unset."""

    metrics_endpoint: str | None = "/metrics"
    """Path of the Prometheus endpoint on ``metrics_port``; empty or null turns it off."""

    metrics_port: int = 8082
    """Port of the Prometheus metrics server."""

    metrics_rest_server_prefix: str = "rest_server"
    """Prefix of the REST server's metric names."""

    metrics_dir: str | None = None
    """Accepted for MLServer compatibility; inferd keeps metrics in memory."""

    use_structured_logging: bool = False
    """Write logs as JSON lines."""

    access_log: bool | None = None
    """Log one line per HTTP request (uvicorn's access log); unset: on with ``debug``."""

    logging_settings: str | dict[str, Any] | None = None
    """A ``logging.config`` dict, or the path of a JSON/YAML file holding one."""

    gzip_enabled: bool = True
    """Compress large REST responses for clients that accept gzip."""

    max_request_size: int = Field(default=128 * 1024 * 1024, gt=0)
    """Largest request body accepted, in bytes (after gzip decompression); larger gets 413."""

    environments_dir: str | None = None
    """Accepted for MLServer compatibility; per-model environments are not supported."""

    model_repository_implementation: str | None = None
    """Accepted for MLServer compatibility; only the folder repository is supported."""

    model_repository_implementation_args: dict[str, Any] = {}
    """Accepted for MLServer compatibility; unused."""

    kafka_enabled: bool = False
    """MLServer's Kafka server is not supported; true is refused."""

    kafka_servers: str = "localhost:9092"
    """Accepted for MLServer compatibility; unused."""

    kafka_topic_input: str = "mlserver-input"
    """Accepted for MLServer compatibility; unused."""

    kafka_topic_output: str = "mlserver-output"
    """Accepted for MLServer compatibility; unused."""

    tracing_server: str | None = None
    """Accepted for MLServer compatibility; tracing is not supported."""

    cache_enabled: bool = False
    """Accepted for MLServer compatibility; response caching is not supported."""

    cache_size: int = 100
    """Accepted for MLServer compatibility; unused."""

    @field_validator("parallel_workers", mode="before")
    @classmethod
    def _cpu_count(cls, value: Any) -> Any:
        if value == "cpu_count":
            return len(os.sched_getaffinity(0))
        return value

    @field_validator("parallel_workers")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be 0 (inference in the main process) or more")
        return value

    @field_validator("kafka_enabled")
    @classmethod
    def _no_kafka(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "inferd has no Kafka server (MLServer's Kafka inference is not supported); "
                "remove kafka_enabled or set it to false"
            )
        return value

    @property
    def metrics_enabled(self) -> bool:
        return bool(self.metrics_endpoint)

    @property
    def access_log_enabled(self) -> bool:
        return self.debug if self.access_log is None else self.access_log

    def ignored_settings(self) -> list[str]:
        """MLServer settings that are set but that inferd does not act on."""
        ignored = []
        for name in (
            "environments_dir",
            "metrics_dir",
            "model_repository_implementation",
            "tracing_server",
        ):
            if getattr(self, name):
                ignored.append(name)
        if self.cache_enabled:
            ignored.append("cache_enabled")
        return ignored


class MetadataTensorSettings(BaseModel):
    """A declared input or output in ``model-settings.json``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    datatype: str
    shape: list[int]
    parameters: dict[str, Any] | None = None

    @field_validator("datatype")
    @classmethod
    def _known_datatype(cls, value: str) -> str:
        if value not in DATATYPES:
            raise ValueError(f"unknown datatype {value!r}; expected one of {', '.join(DATATYPES)}")
        return value


class ModelParameters(_EnvFirstSettings):
    """The ``parameters`` block of ``model-settings.json``."""

    model_config = SettingsConfigDict(extra="forbid")

    env_infix: ClassVar[str] = "MODEL_"

    uri: str | None = None
    """Where the model's artifacts are; relative paths are relative to the model's folder."""

    version: str | None = None
    """This model's version; a model may be served in several versions at once."""

    format: str | None = None
    """Format of the artifact, for runtimes that read several."""

    content_type: str | None = None
    """Default content type for decoding requests and encoding responses."""

    extra: dict[str, Any] = {}
    """Runtime-specific settings (e.g. ``predict_fn`` for scikit-learn)."""

    environment_path: str | None = None
    """Accepted for MLServer compatibility; per-model environments are not supported."""

    environment_tarball: str | None = None
    """Accepted for MLServer compatibility; per-model environments are not supported."""

    inference_pool_gid: str | None = None
    """Accepted for MLServer compatibility; unused."""

    autogenerate_inference_pool_gid: bool = False
    """Accepted for MLServer compatibility; unused."""

    @field_validator("extra", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class ModelSettings(_EnvFirstSettings):
    """One model version (``model-settings.json``)."""

    model_config = SettingsConfigDict(extra="forbid", populate_by_name=True)

    env_infix: ClassVar[str] = "MODEL_"

    name: str = ""
    """The model's name; defaults to the name of its folder."""

    platform: str = ""
    """Framework the model was trained with, reported in metadata."""

    versions: list[str] = []
    """Versions of the libraries the model was trained with, reported in metadata."""

    inputs: list[MetadataTensorSettings] = []
    """Declared inputs, reported in metadata."""

    outputs: list[MetadataTensorSettings] = []
    """Declared outputs, reported in metadata."""

    implementation: str | None = None
    """Import path of the runtime class, e.g. ``inferd.runtimes.sklearn.SKLearnModel``
    (MLServer names such as ``mlserver_sklearn.SKLearnModel`` work too)."""

    max_batch_size: int = Field(default=0, ge=0)
    """Adaptive batching: most rows in one batch; 0 or 1 turns batching off."""

    max_batch_time: float = Field(default=0.0, ge=0)
    """Adaptive batching: longest a request waits for company, in seconds."""

    max_queue_size: int = Field(default=0, ge=0)
    """Most requests that may wait in this version's queue (0: no bound). Past it a
    request is refused at once with 503 / UNAVAILABLE and a Retry-After header."""

    timeout: float | None = Field(default=None, ge=0)
    """Longest a request may wait in the queue, in seconds (0 or none: no limit); a
    request's own ``timeout`` parameter (microseconds, as in Triton) replaces it.
    A request past it leaves the queue with 504 / DEADLINE_EXCEEDED, unrun."""

    default_priority_level: int = Field(default=1, ge=1)
    """The priority level of requests without a ``priority`` parameter (or with 0).
    As in Triton, 1 is the highest level and larger numbers are lower."""

    parameters: ModelParameters | None = None
    """Per-version parameters: uri, version, content_type, extra."""

    workers: int | None = Field(default=None, ge=1)
    """How many of the server's worker processes load this model (default: all of
    them). A heavy model can live in a few workers and a light one in all, so memory
    is not models x workers. Has no effect with ``parallel_workers: 0``."""

    threads_per_worker: int = Field(default=1, ge=1)
    """How many requests one worker runs at once for this model. Raise it for models
    that wait on I/O or a GPU; CPU-bound Python gains nothing (one worker = one core).
    With ``parallel_workers: 0`` it bounds the requests running in the main process."""

    devices: list[str] = []
    """Devices to spread this model's workers over, e.g. ``["cuda:0", "cuda:1"]``:
    worker i gets device i mod n as ``self.context.device``, and for ``cuda:N``
    CUDA_VISIBLE_DEVICES=N is set in that worker before the runtime loads, so there
    the GPU is the only one visible (address it as ``cuda`` or ``cuda:0``).
    With ``parallel_workers: 0`` the model gets the first device and no variable is set."""

    parallel_workers: int | None = None
    """Deprecated in MLServer; accepted and ignored (use the server's setting)."""

    warm_workers: bool = False
    """Deprecated in MLServer; accepted and ignored."""

    cache_enabled: bool = False
    """Accepted for MLServer compatibility; response caching is not supported."""

    # The model-settings.json this came from; set by the loader, never by the file.
    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def version(self) -> str | None:
        return self.parameters.version if self.parameters else None

    @property
    def folder(self) -> Path:
        """Folder the model's relative paths are resolved against."""
        return self.source.parent if self.source else Path.cwd()

    @property
    def uri(self) -> Path:
        """Absolute location of the model's artifacts (its folder when no uri is set)."""
        uri = self.parameters.uri if self.parameters else None
        if not uri:
            return self.folder
        path = Path(uri)
        return path if path.is_absolute() else self.folder / path

    @property
    def extra(self) -> dict[str, Any]:
        return self.parameters.extra if self.parameters else {}

    def ignored_settings(self) -> list[str]:
        """MLServer model settings that are set but that inferd does not act on."""
        ignored = [name for name in _IGNORED_MODEL_SETTINGS if getattr(self, name)]
        if self.parameters:
            parameters = self.parameters
            ignored += [
                f"parameters.{name}" for name in _IGNORED_PARAMETERS if getattr(parameters, name)
            ]
        return ignored


_IGNORED_MODEL_SETTINGS = ("parallel_workers", "warm_workers", "cache_enabled")
_IGNORED_PARAMETERS = (
    "environment_path",
    "environment_tarball",
    "inference_pool_gid",
    "autogenerate_inference_pool_gid",
)
