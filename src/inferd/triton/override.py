"""A load's configuration override (Triton's ``load_model(name, config=...)``).

The JSON changes how this load serves the model: batching, queue, workers and
devices, warmup, timeouts. It never changes what the model *is*: a key that
names code or files (``implementation``, ``parameters`` with its ``uri`` and
environments, Triton's ``backend`` or ``default_model_filename``) is refused,
since anyone who reaches the port could otherwise make the server import code or
read a path of their choosing. Every error says ``failed to load '<name>'``, as
Triton's do, and leaves the version already loaded serving.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import orjson
from pydantic import TypeAdapter, ValidationError

from inferd.errors import InvalidRequest
from inferd.json_refusals import not_json_reason
from inferd.settings import ModelSettings
from inferd.tensors.datatypes import numpy_dtype
from inferd.triton.config import MICROSECONDS

# model-settings.json keys that only change how the model is served.
SERVING_KEYS = frozenset(
    (
        "max_batch_size",
        "max_batch_time",
        "max_queue_size",
        "max_concurrent_streams",
        "timeout",
        "inference_timeout",
        "retry_on_worker_failure",
        "default_priority_level",
        "workers",
        "threads_per_worker",
        "devices",
        "model_warmup",
        "sequence_batching",  # when the settings have it (sequence batching)
    )
)
# Keys that name code or files: never from a client.
CODE_KEYS = frozenset(
    (
        "implementation",
        "parameters",
        "uri",
        "extra",
        "environment_path",
        "environment_tarball",
        "backend",
        "platform",
        "default_model_filename",
        "cc_model_filenames",
        "model_repository_agents",
        "optimization",
        "input_data_file",
    )
)
# What the model declares about itself stays as its model-settings.json says.
DECLARED_KEYS = frozenset(("input", "output", "inputs", "outputs", "versions", "version_policy"))


def failed(name: str, reason: str) -> InvalidRequest:
    return InvalidRequest(f"failed to load '{name}': {reason}")


def apply_override(settings: ModelSettings, config: str, max_request_size: int) -> ModelSettings:
    """``settings`` with the configuration override ``config`` (JSON) applied;
    InvalidRequest saying ``failed to load`` and why when it cannot be.

    A warmup input may not be larger than ``max_request_size``: the server would
    not take such a request from a client either."""
    name = settings.name
    try:
        parsed = orjson.loads(config)
    except orjson.JSONDecodeError as error:
        raise failed(
            name, not_json_reason(config.encode(), error, "the config parameter")
        ) from None
    if not isinstance(parsed, dict):
        raise failed(name, "the config parameter must be a JSON object")
    updates: dict[str, Any] = {}
    for key, value in parsed.items():
        updates.update(_translate(settings, key, value))
    changed = _validated(settings, updates)
    _check_warmup_sizes(changed, max_request_size)
    return _with_triton_config(changed, parsed)


# The override's keys that are Triton configuration fields: a Triton folder's
# configuration (what /config answers and initialize(args) reads) shows them.
TRITON_FIELDS = frozenset(
    ("dynamic_batching", "instance_group", "sequence_batching", "model_warmup")
)


def _with_triton_config(settings: ModelSettings, parsed: dict[str, Any]) -> ModelSettings:
    """A Triton model folder keeps its config.pbtxt's JSON form in its settings; the
    override's Triton fields replace those there, as Triton serves the override's
    configuration (else a load batching 16 would still say the file's 8)."""
    own = settings.extra.get("triton_config")
    if own is None or settings.parameters is None:
        return settings
    config = dict(own) | {key: parsed[key] for key in TRITON_FIELDS & parsed.keys()}
    if "max_batch_size" in parsed:
        config["max_batch_size"] = settings.max_batch_size  # validated: a whole number
    extra = {**settings.extra, "triton_config": config}
    parameters = settings.parameters.model_copy(update={"extra": extra})
    # As when read from the folder: Triton batches requests only with dynamic_batching.
    batches = config.get("dynamic_batching") is not None
    max_batch_size = int(config.get("max_batch_size", 0)) if batches else 0
    return settings.model_copy(update={"parameters": parameters, "max_batch_size": max_batch_size})


def _check_warmup_sizes(settings: ModelSettings, max_request_size: int) -> None:
    rows = settings.max_batch_size > 1
    for warmup in settings.model_warmup:
        for input_name, spec in warmup.inputs.items():
            shape = [warmup.batch_size, *spec.dims] if rows else spec.dims
            size = math.prod(shape) * max(numpy_dtype(spec.data_type).itemsize, 1)
            if size > max_request_size:
                raise failed(
                    settings.name,
                    f"warmup input {input_name!r} would be {size} bytes, over the server's "
                    f"max_request_size ({max_request_size})",
                )


def _translate(settings: ModelSettings, key: str, value: Any) -> dict[str, Any]:
    """The model-settings fields one key of the override sets."""
    name = settings.name
    if key in CODE_KEYS:
        raise failed(
            name,
            f"the config override may not set {key!r}: it names code or files the server "
            "would import or read, which a client must not choose; change it in the "
            "model's model-settings.json on the server",
        )
    if key in DECLARED_KEYS:
        raise failed(
            name,
            f"the config override may not set {key!r}: a model's inputs, outputs and "
            "versions are as its model-settings.json declares them",
        )
    if key == "name":
        if value != name:
            raise failed(name, f"the config names model {value!r}, not {name!r}")
        return {}
    if key == "dynamic_batching":
        return _dynamic_batching(settings, _object(name, key, value))
    if key == "instance_group":
        return _instance_group(settings, value)
    if key in SERVING_KEYS and key in ModelSettings.model_fields:
        return {key: value}
    allowed = ", ".join(sorted((SERVING_KEYS & set(ModelSettings.model_fields)) | _TRITON_KEYS))
    raise failed(name, f"unknown config key {key!r}; the keys a load may set are: {allowed}")


_TRITON_KEYS = frozenset(("name", "dynamic_batching", "instance_group"))


def _object(name: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise failed(name, f"{key} must be a JSON object")
    return value


def _dynamic_batching(settings: ModelSettings, block: dict[str, Any]) -> dict[str, Any]:
    name = settings.name
    updates: dict[str, Any] = {}
    for key, value in block.items():
        if key == "max_queue_delay_microseconds":
            updates["max_batch_time"] = _number(name, key, value) / MICROSECONDS
        elif key == "default_priority_level":
            updates["default_priority_level"] = value or 1  # Triton's 0: the default
        elif key == "default_queue_policy":
            updates.update(_queue_policy(name, _object(name, key, value)))
        elif key == "preferred_batch_size":
            updates["_preferred_batch_size"] = value  # checked once max_batch_size is known
        elif key == "preserve_ordering" and value is False:
            pass  # inferd answers each request on its own: nothing to preserve
        elif key in ("priority_levels", "priority_queue_policy", "preserve_ordering"):
            raise failed(
                name,
                f"dynamic_batching.{key} is not supported: inferd takes every priority "
                "level with one queue policy (default_queue_policy)",
            )
        else:
            raise failed(name, f"unknown dynamic_batching key {key!r}")
    return updates


def _queue_policy(name: str, policy: dict[str, Any]) -> dict[str, Any]:
    updates: dict[str, Any] = {}
    for key, value in policy.items():
        if key == "default_timeout_microseconds":
            updates["timeout"] = _number(name, key, value) / MICROSECONDS or None
        elif key == "max_queue_size":
            updates["max_queue_size"] = value
        elif key == "timeout_action" and value in ("REJECT", 0):
            pass  # what inferd does: a request past its timeout leaves the queue unrun
        elif key == "allow_timeout_override" and value is True:
            pass  # what inferd does: a request's own timeout parameter wins
        elif key in ("timeout_action", "allow_timeout_override"):
            raise failed(
                name,
                f"default_queue_policy.{key} {value!r} is not supported: requests past "
                "their timeout are rejected, and a request's timeout parameter applies",
            )
        else:
            raise failed(name, f"unknown default_queue_policy key {key!r}")
    return updates


def _instance_group(settings: ModelSettings, groups: Any) -> dict[str, Any]:
    name = settings.name
    if not isinstance(groups, list) or len(groups) != 1 or not isinstance(groups[0], dict):
        raise failed(name, "instance_group must be a list of one group (one kind of device)")
    group = groups[0]
    unknown = sorted(set(group) - {"name", "kind", "count", "gpus"})
    if unknown:
        raise failed(name, f"unknown instance_group keys: {', '.join(unknown)}")
    updates: dict[str, Any] = {}
    if "count" in group:
        updates["workers"] = group["count"]
    kind = group.get("kind", "KIND_AUTO")
    gpus = group.get("gpus")
    if kind == "KIND_CPU":
        if gpus:
            raise failed(name, "instance_group: a KIND_CPU group lists no gpus")
        updates["devices"] = []
    elif kind == "KIND_GPU" or gpus:
        if not isinstance(gpus, list) or not gpus or not all(isinstance(g, int) for g in gpus):
            raise failed(name, "instance_group: a KIND_GPU group lists its gpus, e.g. [0, 1]")
        updates["devices"] = [f"cuda:{gpu}" for gpu in gpus]
    elif kind != "KIND_AUTO":
        raise failed(name, f"instance_group kind {kind!r} is not supported")
    return updates


def _number(name: str, key: str, value: Any) -> float:
    # Triton's JSON may carry 64-bit numbers as strings.
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise failed(name, f"{key} must be a number, not {value!r}") from None
    if number < 0:
        raise failed(name, f"{key} must be >= 0")
    return number


def _validated(settings: ModelSettings, updates: dict[str, Any]) -> ModelSettings:
    """Each value checked as model-settings.json's own would be, then applied."""
    name = settings.name
    preferred = updates.pop("_preferred_batch_size", None)
    checked: dict[str, Any] = {}
    for key, value in updates.items():
        adapter = _field_adapter(key)
        try:
            checked[key] = adapter.validate_python(value)
        except ValidationError as error:
            problems = "; ".join(_problem(key, detail) for detail in error.errors())
            raise failed(name, problems) from None
    result = settings.model_copy(update=checked)
    if preferred is not None and preferred not in ([], [result.max_batch_size]):
        raise failed(
            name,
            "dynamic_batching.preferred_batch_size can only be [max_batch_size]: inferd "
            "sends a batch as soon as it is full, and what waits up to max_batch_time",
        )
    return result


def _problem(key: str, detail: Any) -> str:
    where = ".".join(str(part) for part in (key, *detail.get("loc", ())))
    return f"{where}: {detail.get('msg', 'invalid')}"


def _field_adapter(key: str) -> TypeAdapter[Any]:
    """What validates one ModelSettings field on its own (its type and bounds)."""
    field = ModelSettings.model_fields[key]
    annotation: Any = field.annotation
    if field.metadata:
        annotation = Annotated[annotation, *field.metadata]
    return TypeAdapter(annotation)
