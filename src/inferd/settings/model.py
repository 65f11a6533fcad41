"""One model version's settings (``model-settings.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from pydantic_settings import SettingsConfigDict

from inferd.settings.base import EnvFirstSettings
from inferd.settings.warmup import WarmupSettings
from inferd.tensors.datatypes import DATATYPES


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


class SequenceBatchingSettings(BaseModel):
    """The ``sequence_batching`` block of ``model-settings.json`` (Triton's sequence
    batcher): every request of a sequence reaches the same model instance, in order."""

    model_config = ConfigDict(extra="forbid")

    max_sequence_idle_microseconds: int = Field(default=1_000_000, ge=0)
    """How long a sequence may go without a request (none queued or running) before
    it expires, in microseconds, as in Triton; 0 means Triton's default, 1000000 (1 s).
    An expired sequence is forgotten (its next request is refused with 400) and its
    runtime's ``sequence_end(sequence_id)`` is called so it can drop its state."""

    direct: dict[str, Any] | None = None
    """Triton's Direct strategy block: accepted (a Triton config carries it), not used:
    inferd runs each request of a sequence alone, in the sequence's worker."""

    oldest: dict[str, Any] | None = None
    """Triton's Oldest strategy block: accepted, not used (as ``direct``)."""

    @property
    def idle_timeout(self) -> float:
        """``max_sequence_idle_microseconds`` in seconds, with 0 read as the default."""
        return (self.max_sequence_idle_microseconds or 1_000_000) / 1e6


class ModelParameters(EnvFirstSettings):
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
    """An existing Python environment (a venv or conda environment: the folder holding
    ``bin/python``) this model's worker processes run in; relative to the working
    directory, as in MLServer. Needs ``parallel_workers`` of 1 or more."""

    environment_tarball: str | None = None
    """A conda-pack or venv-pack tarball of the environment this model's worker processes
    run in, unpacked once into the server's ``environments_dir``; relative to the model's
    folder. Needs ``parallel_workers`` of 1 or more."""

    inference_pool_gid: str | None = None
    """Accepted for MLServer compatibility; unused."""

    autogenerate_inference_pool_gid: bool = False
    """Accepted for MLServer compatibility; unused."""

    @field_validator("extra", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class ModelSettings(EnvFirstSettings):
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
    """Declared inputs, reported in metadata and read by codecs (as MLServer does: a request
    is not refused by them; a Triton config.pbtxt's inputs are enforced)."""

    outputs: list[MetadataTensorSettings] = []
    """Declared outputs, reported in metadata."""

    implementation: str | None = None
    """Import path of the runtime class, e.g. ``inferd.runtimes.sklearn.SKLearnModel``
    (MLServer names such as ``mlserver_sklearn.SKLearnModel`` work too)."""

    max_batch_size: int = Field(default=0, ge=0)
    """Adaptive batching: most rows in one batch; 0 or 1 turns batching off."""

    max_batch_time: float = Field(default=0.0, ge=0)
    """Adaptive batching: longest a request waits for company, in seconds."""

    max_queue_size: int | None = Field(default=None, ge=0)
    """Most requests that may wait in this version's queue for a free slot; unset: the
    server's ``max_queue_size``; 0: no bound. Past it a request is refused at once with
    503 / UNAVAILABLE and a Retry-After header."""

    max_concurrent_streams: int = Field(default=256, ge=1)
    """Most streams of this version open at once whose ``predict_stream`` is an async
    generator (they hold no worker slot). Past it a new stream is refused at once with
    503 / UNAVAILABLE and Retry-After. Plain-generator streams wait for a slot instead."""

    timeout: float | None = Field(default=None, ge=0)
    """Longest a request may wait in the queue, in seconds (0 or none: no limit); a
    request's own ``timeout`` parameter (microseconds, as in Triton) replaces it.
    A request past it leaves the queue with 504 / DEADLINE_EXCEEDED, unrun."""

    version_weights: dict[str, float] = {}
    """Shares of the requests that name no version, by version (e.g. ``{"1": 90, "2":
    10}``): read from the version such a request reaches by default (the highest one
    loaded); versions not loaded, or not listed, get none. Empty: no split."""

    version_sticky_header: str | None = None
    """With ``version_weights``: a request header (e.g. ``x-user-id``) whose value picks
    the version, so that requests with the same value always reach the same one."""

    inference_timeout: float | None = Field(default=None, ge=0)
    """Longest one call of the model may run in a worker process, in seconds (0 or
    none: no limit). Unlike ``timeout`` (time waiting in the queue), it counts from
    when the request reaches a worker. A call past it is answered 504 /
    DEADLINE_EXCEEDED naming the model and the limit, and the worker process running
    it is killed and restarted with its models; the other requests it was running are
    retried (see ``retry_on_worker_failure``). Streams are not timed. Needs worker
    processes: with ``parallel_workers: 0`` a call cannot be stopped, so the setting
    is refused there."""

    retry_on_worker_failure: bool = True
    """Whether a request running in a worker process that dies (it crashed, was
    killed, or was stopped for running past another request's ``inference_timeout``)
    is sent once more, to another worker holding the model or to the restarted one.
    Set it to false for a runtime whose predict must not run twice for one request
    (it has side effects): such a request answers 503 / UNAVAILABLE with the reason.
    Streams are never retried: they fail with the reason."""

    default_priority_level: int = Field(default=1, ge=1)
    """The priority level of requests without a ``priority`` parameter (or with 0).
    As in Triton, 1 is the highest level and larger numbers are lower."""

    parameters: ModelParameters | None = None
    """Per-version parameters: uri, version, content_type, extra."""

    sequence_batching: SequenceBatchingSettings | None = None
    """Triton's sequence batching: set it (``{}`` for the defaults) to serve stateful
    models. Each request then carries Triton's ``sequence_id`` (a number or a string),
    ``sequence_start`` and ``sequence_end`` parameters; every request of a sequence
    runs in the same worker process, one at a time, in the order it arrived, and the
    runtime keeps the sequence's state (see ``Model.sequence_end``)."""

    workers: int | None = Field(default=None, ge=1)
    """How many of the server's worker processes load this model (default: all of
    them). A heavy model can live in a few workers and a light one in all, so memory
    is not models x workers. Has no effect with ``parallel_workers: 0``. With the
    server's ``fork_workers``, a model forked from its own parent gets this many
    workers of its own (default: ``parallel_workers``)."""

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
    """Answer identical requests to this model from the server's response cache; has
    effect only when settings.json sets ``cache_enabled`` too (as in MLServer)."""

    model_warmup: list[WarmupSettings] = []
    """Requests run in every worker holding the model once it loaded, before it is
    READY (Triton's ``model_warmup``): each has ``inputs`` (by name: ``data_type``,
    ``dims`` and one of ``zero_data``, ``random_data`` or inline ``input_data``), a
    ``count`` and a ``batch_size``. A warmup that fails fails the load."""

    # The model-settings.json this came from; set by the loader, never by the file.
    _source: Path | None = PrivateAttr(default=None)

    @field_validator("version_weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        if any(weight < 0 for weight in value.values()):
            raise ValueError("each version's weight must be 0 or more")
        if value and not any(value.values()):
            raise ValueError("at least one version needs a weight above 0")
        return value

    @property
    def cuda_devices(self) -> list[str]:
        """Its ``devices`` that are GPUs (``cuda``, ``cuda:N``): such a model is neither
        forked from a parent (``fork_workers``) nor copied into every protocol process."""
        return [device for device in self.devices if device.startswith("cuda")]

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def version(self) -> str | None:
        return self.parameters.version if self.parameters else None

    @property
    def label(self) -> str:
        """How messages name this version: ``model 'iris'`` or ``model 'iris' version '2'``."""
        if self.version:
            return f"model {self.name!r} version {self.version!r}"
        return f"model {self.name!r}"

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


_IGNORED_MODEL_SETTINGS = ("parallel_workers", "warm_workers")
_IGNORED_PARAMETERS = (
    "inference_pool_gid",
    "autogenerate_inference_pool_gid",
)


class NamedBySettings:
    """A model's name and version, read from its settings (a runtime's, a served version's)."""

    __slots__ = ()
    settings: ModelSettings

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def version(self) -> str | None:
        return self.settings.version
