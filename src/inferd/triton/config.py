"""Triton's model configuration, derived from a model version's settings.

``GET /v2/models/{m}/config`` and gRPC ``ModelConfig`` answer it, so Triton's
clients and tools (``get_model_config``, perf_analyzer, model analyzer) read an
inferd model as they read a Triton one. The dictionary here is Triton's JSON
form (``model_config.proto`` field names, enums by name, numbers as numbers);
the gRPC server parses it into ``ModelConfig``.
"""

from __future__ import annotations

from typing import Any

from inferd.settings import ModelSettings
from inferd.settings.warmup import TRITON_DATATYPES, WarmupSettings

# The TYPE_* name of each V2 datatype.
TRITON_DATATYPE_OF: dict[str, str] = {v2: triton for triton, v2 in TRITON_DATATYPES.items()}
MICROSECONDS = 1_000_000


def batches(settings: ModelSettings) -> bool:
    """Whether the model batches (inferd: ``max_batch_size`` > 1; Triton: > 0)."""
    return settings.max_batch_size > 1


def model_config(
    settings: ModelSettings, instances: int, server_max_queue_size: int
) -> dict[str, Any]:
    """Triton's model configuration of a loaded version.

    ``instances``: how many workers hold it now; ``server_max_queue_size``: the
    queue bound of versions that set none."""
    own = settings.extra.get("triton_config")
    if own is not None:  # a Triton model folder's: its config.pbtxt, as it was read
        return dict(own)
    batching = batches(settings)
    config: dict[str, Any] = {
        "name": settings.name,
        "platform": settings.platform,
        "backend": settings.implementation or "",
        "max_batch_size": settings.max_batch_size if batching else 0,
        "input": [_tensor(tensor, batching) for tensor in settings.inputs],
        "output": [_tensor(tensor, batching) for tensor in settings.outputs],
        "instance_group": [_instance_group(settings, instances)],
    }
    sequence = sequence_batching(settings)
    if sequence is not None:
        config["sequence_batching"] = sequence
    elif batching:
        config["dynamic_batching"] = _dynamic_batching(settings, server_max_queue_size)
    if settings.model_warmup:
        config["model_warmup"] = [_warmup(warmup) for warmup in settings.model_warmup]
    return config


def sequence_batching(settings: ModelSettings) -> dict[str, Any] | None:
    """The ``sequence_batching`` block, when the settings have one.

    Hook for sequence batching: a settings object holding ``sequence_batching``
    (a dictionary, or a model with ``triton_config()`` or ``model_dump()``) is
    shown as it describes itself."""
    block = getattr(settings, "sequence_batching", None)
    if block is None:
        return None
    if hasattr(block, "triton_config"):
        return dict(block.triton_config())
    if hasattr(block, "model_dump"):
        return dict(block.model_dump(exclude_none=True))
    return dict(block)


def _tensor(tensor: Any, batching: bool) -> dict[str, Any]:
    # With batching, the first dimension of a declared shape is the batch: Triton's
    # dims leave it out.
    dims = list(tensor.shape[1:] if batching and tensor.shape else tensor.shape)
    return {"name": tensor.name, "data_type": TRITON_DATATYPE_OF[tensor.datatype], "dims": dims}


def _instance_group(settings: ModelSettings, instances: int) -> dict[str, Any]:
    gpus = [_gpu_index(device) for device in settings.devices if device.startswith("cuda")]
    group: dict[str, Any] = {
        "name": settings.name,
        "kind": "KIND_GPU" if gpus else "KIND_CPU",
        "count": instances,
    }
    if gpus:
        group["gpus"] = gpus
    return group


def _gpu_index(device: str) -> int:
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else 0


def _dynamic_batching(settings: ModelSettings, server_max_queue_size: int) -> dict[str, Any]:
    queue_size = settings.max_queue_size
    return {
        # A full batch is sent at once, without waiting for max_batch_time.
        "preferred_batch_size": [settings.max_batch_size],
        "max_queue_delay_microseconds": round(settings.max_batch_time * MICROSECONDS),
        "default_priority_level": settings.default_priority_level,
        "default_queue_policy": {
            # A request past its timeout leaves the queue unrun (504).
            "timeout_action": "REJECT",
            "default_timeout_microseconds": round((settings.timeout or 0) * MICROSECONDS),
            # A request's own ``timeout`` parameter replaces the model's.
            "allow_timeout_override": True,
            "max_queue_size": server_max_queue_size if queue_size is None else queue_size,
        },
    }


def _warmup(warmup: WarmupSettings) -> dict[str, Any]:
    inputs = {}
    for name, spec in warmup.inputs.items():
        entry: dict[str, Any] = {
            "data_type": TRITON_DATATYPE_OF[spec.data_type],
            "dims": list(spec.dims),
        }
        if spec.zero_data:
            entry["zero_data"] = True
        elif spec.random_data:
            entry["random_data"] = True
        else:
            entry["input_data"] = spec.input_data  # inferd's: inline data
        inputs[name] = entry
    return {
        "name": warmup.name,
        "batch_size": warmup.batch_size,
        "count": warmup.count,
        "inputs": inputs,
    }
