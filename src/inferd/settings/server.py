"""Server-wide settings (``settings.json``)."""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from inferd.settings.base import EnvFirstSettings
from inferd.settings.cpu_quota import available_cpus
from inferd.settings.security import RestrictedApiSettings, check_unique_groups
from inferd.version import __version__

MAX_PORT = 65535
# The default bound of every model version's queue: see docs/batching.md "Overload".
DEFAULT_MAX_QUEUE_SIZE = 256


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


class ServerSettings(EnvFirstSettings):
    """Server-wide settings (``settings.json``)."""

    model_config = SettingsConfigDict(extra="forbid", validate_default=True)
    # `inferd start --http-port` and its siblings win over the environment.
    takes_flags: ClassVar[bool] = True

    debug: bool = False
    """Log at debug level (one line per request)."""

    log_level: Literal["debug", "info", "warning", "error", "critical"] | None = None
    """Level of the logs of every process of the server (its workers' included); unset:
    ``debug`` when ``debug`` is true, else ``info``. Any case is accepted."""

    parallel_workers: int = 1
    """Worker processes that run inference; 0 runs it in the main process.
    ``"cpu_count"`` means the number of cores this process may use: its CPU affinity,
    capped by its container's CPU quota (cgroup ``cpu.max``), rounded up."""

    protocol_processes: int = Field(default_factory=available_cpus, ge=1)
    """Processes that take requests: each accepts REST and gRPC connections on the
    same ports (``SO_REUSEPORT``), decodes, runs the models that can run in it, and
    encodes. Default (and ``"cpu_count"``): the CPUs this process may use, as for
    ``parallel_workers``. 1 serves everything from one process. See docs/every-core.md
    "Using every core"."""

    parallel_workers_timeout: int = 5
    """Seconds to wait for a worker process to stop before it is killed."""

    fork_workers: bool | None = None
    """Load a CPU model once, in a parent process of its own, and fork the model's
    workers from it: they share the loaded model's memory (copy-on-write), start
    together, and a worker that dies is forked again without loading the model
    again. Left out (the default), each CPU model run by two or more workers is
    forked (with one worker the parent would be one more process for nothing
    shared); ``true`` forks every CPU model, one run by one worker too (its worker
    then restarts without a load); ``false`` none. Models with a ``cuda:*`` device
    and models whose load is not fork-safe (threads, sockets, GNU OpenMP: said in the
    log with the cost) load in each worker. Each forked model gets a parent and
    ``workers`` processes of its own. See docs/every-core.md "Workers that
    share one copy of a model"."""

    fork_protocol_processes: bool = True
    """With several protocol processes, load the models each of them copies once, in a
    parent that forks the protocol processes (copy-on-write): each added process then
    costs its own pages, not another copy of every model, and one that dies is forked
    again without loading anything. A model whose load is not fork-safe (threads,
    sockets, GNU OpenMP) loads in each process instead, with a warning. False starts
    each protocol process as a fresh interpreter that loads every copied model. See
    docs/design.md "Protocol processes forked from loaded models"."""

    shutdown_grace_seconds: float = Field(default=25.0, gt=0)
    """Seconds from SIGTERM to exit: requests in flight may finish within it, those
    still running near its end are stopped with an error, then the process exits.
    Keep it under Kubernetes' ``terminationGracePeriodSeconds`` (30 by default)."""

    model_repository_root: str = "."
    """Folder searched (recursively) for ``model-settings.json`` files."""

    load_models_at_startup: bool = True
    """Load every model found in the repository when the server starts."""

    load_on_request: bool = False
    """Load no model at the start: a request for a model of the repository that is not
    loaded loads it, and is answered once it is ready (see docs/serving-models.md "Models loaded
    on request"). ``load_models_at_startup`` then has no effect."""

    max_loaded_models: int = Field(default=0, ge=0)
    """With ``load_on_request``: most models loaded on request at once; past it the
    least recently used idle one is unloaded. 0: no limit. Models loaded through the
    repository API are pinned, and not counted."""

    repository_poll_secs: float = Field(default=0, ge=0)
    """Seconds between two looks at ``model_repository_root`` for changed, new and
    removed model folders, which are then reloaded, loaded and unloaded (Triton's
    ``--repository-poll-secs``); 0 turns polling off."""

    server_name: str = "inferd"
    """Name reported by server metadata (``GET /v2``)."""

    server_version: str = __version__
    """Version reported by server metadata."""

    extensions: list[str] = []
    """Extra protocol extensions to report in server metadata."""

    host: str = "0.0.0.0"
    """Address the REST, gRPC and metrics servers listen on."""

    http_port: int = Field(default=8080, ge=0, le=MAX_PORT)
    """Port of the REST server; 0: any free port (one protocol process only)."""

    root_path: str = ""
    """ASGI root path, for a server mounted below a URL prefix by a proxy."""

    grpc_port: int = Field(default=8081, ge=0, le=MAX_PORT)
    """Port of the gRPC server."""

    grpc_max_message_length: int | None = None
    """Largest gRPC message accepted or sent, in bytes (default: max_request_size);
    -1: no limit (ModelMesh sets ``MLSERVER_GRPC_MAX_MESSAGE_LENGTH=-1``)."""

    cors_settings: CORSSettings | None = None
    """CORS for the REST server; no CORS headers when unset."""

    metrics_endpoint: str | None = "/metrics"
    """Path of the Prometheus endpoint on ``metrics_port``; empty or null turns it off."""

    metrics_port: int = Field(default=8082, ge=0, le=MAX_PORT)
    """Port of the Prometheus metrics server."""

    metrics_rest_server_prefix: str = "rest_server"
    """Prefix of the REST server's metric names."""

    metrics_dir: str | None = None
    """Accepted for MLServer compatibility; inferd keeps metrics in memory."""

    use_structured_logging: bool = False
    """Write logs as JSON lines."""

    access_log: bool | None = None
    """Log one line per HTTP request (uvicorn's access log); unset: on when logging at
    debug level (``debug`` or ``log_level: "debug"``)."""

    logging_settings: str | dict[str, Any] | None = None
    """A ``logging.config`` dict, or the path of a JSON/YAML file holding one."""

    gzip_enabled: bool = True
    """Compress REST inference answers of 1 KiB or more as the request's Accept-Encoding
    asks (gzip or deflate), as Triton does; other answers are never compressed."""

    max_request_size: int = Field(default=128 * 1024 * 1024, gt=0)
    """Largest request body accepted, in bytes (after gzip decompression); larger gets 413."""

    max_queue_size: int = Field(default=DEFAULT_MAX_QUEUE_SIZE, ge=0)
    """Most requests that may wait in each model version's queue for a free slot, for
    versions whose model-settings.json sets none (0: no bound). Past it a request is
    refused at once with 503 / UNAVAILABLE and Retry-After, so a load beyond what the
    workers serve grows neither memory nor the wait of admitted requests without bound."""

    # Security: who may use which API, TLS, and the limits on what a client may send.
    # docs/security.md says what is open by default and how to close it.

    restricted_apis: list[RestrictedApiSettings] = []
    """API groups that answer only requests carrying a header with an accepted value,
    e.g. ``[{"apis": ["model_repository", "statistics"], "header": "admin-key",
    "values_from_env": "INFERD_ADMIN_KEYS"}]``. Empty (the default): every group is open."""

    model_repository_api: bool = True
    """Serve the model repository API (index, load, unload over REST and gRPC); false
    refuses it (403 / PERMISSION_DENIED), for deployments whose models never change."""

    ssl_certfile: str | None = None
    """A PEM certificate (chain): REST and gRPC are served over TLS only. Read again
    when the file changes (cert-manager rotation), for new connections."""

    ssl_keyfile: str | None = None
    """The PEM private key of ``ssl_certfile``."""

    ssl_ca_certs: str | None = None
    """PEM CA certificates: clients must present a certificate signed by one of them
    (mutual TLS). Needs ``ssl_certfile``."""

    metrics_ssl: bool = False
    """Serve the metrics port over TLS too (the same certificate and client CA). Off:
    it stays plain HTTP, for a Prometheus scraping inside the cluster."""

    max_header_size: int = Field(default=16 * 1024, gt=0)
    """Largest request header, in bytes: REST's request line and headers (larger gets 431),
    gRPC's metadata (larger gets RESOURCE_EXHAUSTED)."""

    max_connections: int = Field(default=4096, gt=0)
    """Most client connections the REST server, and the gRPC server, each hold at once.
    Past it REST answers 503 on the new connection and gRPC closes it."""

    grpc_max_concurrent_streams: int = Field(default=256, gt=0)
    """Most calls in flight on one gRPC connection (HTTP/2's max concurrent streams);
    a client's further calls wait for one to end."""

    # System shared memory (Triton's extension): docs/shared-memory.md.

    shared_memory_enabled: bool = False
    """Serve Triton's system shared memory extension: clients on this host register
    POSIX shared memory regions and pass tensors by reference. Registering maps the
    memory the client names into the server, so it is off unless set true."""

    shared_memory_key_prefix: str | None = None
    """With shared memory on: accept only keys that start with this prefix (e.g.
    ``"/inferd-"``), so a client cannot map other shared memory on the host."""

    environments_dir: str | None = None
    """Where models' ``environment_tarball`` files are unpacked, each once, in a folder
    named by the tarball's SHA-256; unset: ``.envs`` in the working directory (as in
    MLServer)."""

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
    """An OpenTelemetry collector's OTLP/gRPC endpoint (``host:port``, plain; or
    ``https://host:port``): each REST and gRPC request is traced there. Unset, the
    standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` variable turns tracing on too. Needs
    ``pip install 'inferd[tracing]'``; see docs/observability.md, "Tracing"."""

    cache_enabled: bool = False
    """Turn the response cache on: an identical request to a model whose own
    model-settings.json sets ``cache_enabled`` too is answered from memory, without
    running the model (see docs/batching.md "Response cache")."""

    cache_size: int = Field(default=100, gt=0)
    """Most responses the cache keeps, for all models together; past it the least
    recently used goes."""

    @field_validator("parallel_workers", "protocol_processes", mode="before")
    @classmethod
    def _cpu_count(cls, value: Any) -> Any:
        if value == "cpu_count":
            return available_cpus()
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("parallel_workers")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be 0 (inference in the main process) or more")
        return value

    @field_validator("grpc_max_message_length")
    @classmethod
    def _message_length(cls, value: int | None) -> int | None:
        if value is not None and value < -1:
            raise ValueError("must be a number of bytes, or -1 for no limit")
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

    @field_validator("restricted_apis")
    @classmethod
    def _groups_once(cls, value: list[RestrictedApiSettings]) -> list[RestrictedApiSettings]:
        check_unique_groups(value)
        return value

    @field_validator("shared_memory_key_prefix")
    @classmethod
    def _shm_prefix(cls, value: str | None) -> str | None:
        if value is not None and ("/" in value.removeprefix("/") or not value.strip("/")):
            raise ValueError("must be the start of a shared memory name, such as '/inferd-'")
        return value

    @model_validator(mode="after")
    def _tls_files(self) -> ServerSettings:
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together: set both, or neither")
        needs_certificate = [
            name for name in ("ssl_ca_certs", "metrics_ssl") if getattr(self, name)
        ]
        if needs_certificate and self.ssl_certfile is None:
            raise ValueError(
                f"{needs_certificate[0]} needs TLS: set ssl_certfile and ssl_keyfile too"
            )
        return self

    @property
    def metrics_enabled(self) -> bool:
        return bool(self.metrics_endpoint)

    @property
    def tracing_enabled(self) -> bool:
        """Whether requests are traced: ``tracing_server`` is set, or the standard
        OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variable is (unless OTEL_SDK_DISABLED)."""
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        return bool(
            self.tracing_server
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        )

    @property
    def logging_level(self) -> int:
        """The ``logging`` level of ``log_level``, else of ``debug``."""
        if self.log_level is None:
            return logging.DEBUG if self.debug else logging.INFO
        return int(logging.getLevelNamesMapping()[self.log_level.upper()])

    @property
    def access_log_enabled(self) -> bool:
        if self.access_log is None:
            return self.logging_level <= logging.DEBUG
        return self.access_log

    def ignored_settings(self) -> list[str]:
        """MLServer settings that are set but that inferd does not act on."""
        ignored: list[str] = []
        for name in (
            "metrics_dir",
            "model_repository_implementation",
        ):
            if getattr(self, name):
                ignored.append(name)
        return ignored
