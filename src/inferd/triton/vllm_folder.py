"""A Triton vllm_backend model folder, served unchanged by inferd's vLLM runtime.

``<model>/config.pbtxt`` with ``backend: "vllm"`` and, in each version folder,
``model.json`` (vLLM's engine arguments, as vllm_backend reads them) and optionally
``multi_lora.json`` (LoRA adapters by name, used with ``enable_lora: true``). The
configuration is completed as vllm_backend's ``auto_complete_config`` does
(runtimes/vllm_triton.py: its inputs and outputs, decoupled), and the model runs
:class:`~inferd.runtimes.vllm.VLLMModel` with ``parameters.extra.engine_args`` from
``model.json``: answered on Triton's ``/generate``, ``/generate_stream`` and
``/infer`` with vllm_backend's tensors, and on the OpenAI-compatible ``/v1`` endpoints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferd.errors import ConfigurationError

VLLM_BACKEND = "vllm"
VLLM_RUNTIME = "inferd.runtimes.vllm.VLLMModel"
ENGINE_FILE = "model.json"
LORA_FILE = "multi_lora.json"
TEXT_INPUT, TEXT_OUTPUT = "text_input", "text_output"
FLAGS = ("stream", "exclude_input_in_output")
SUPPORTED_OUTPUTS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")
REFUSED_OUTPUTS = ("return_logprobs", "return_cumulative_logprob")
# vllm_backend's inputs and outputs (its auto_complete_config), added to a folder's
# config.pbtxt where it does not declare them.
INPUTS: list[dict[str, Any]] = [
    {"name": TEXT_INPUT, "data_type": "TYPE_STRING", "dims": [1]},
    *(
        {"name": name, "data_type": "TYPE_BOOL", "dims": [1], "optional": True}
        for name in (*FLAGS, *SUPPORTED_OUTPUTS, *REFUSED_OUTPUTS)
    ),
    {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
]
OUTPUTS: list[dict[str, Any]] = [
    {"name": TEXT_OUTPUT, "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "finish_reason", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "num_input_tokens", "data_type": "TYPE_UINT32", "dims": [1]},
    {"name": "num_output_tokens", "data_type": "TYPE_UINT32", "dims": [-1]},
]


def completed_config(config: dict[str, Any]) -> dict[str, Any]:
    """vllm_backend's ``auto_complete_config``: its inputs and outputs where the folder
    declares none of that name, decoupled, no batching by the server."""
    for key, wanted in (("input", INPUTS), ("output", OUTPUTS)):
        declared = {tensor.get("name") for tensor in config.get(key, [])}
        config[key] = [*config.get(key, []), *(t for t in wanted if t["name"] not in declared)]
    config["model_transaction_policy"] = {"decoupled": True}
    config["max_batch_size"] = 0
    return config


def engine_settings(version: Path) -> dict[str, Any]:
    """``parameters.extra`` for one version folder: ``engine_args`` (model.json) and
    ``multi_lora`` (multi_lora.json, when there is one)."""
    engine_args = _json_object(version / ENGINE_FILE, required=True)
    extra: dict[str, Any] = {"engine_args": engine_args}
    adapters = _json_object(version / LORA_FILE, required=False)
    if adapters is not None:
        extra["multi_lora"] = adapters
    return extra


def _json_object(path: Path, *, required: bool) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if not required:
            return None
        raise ConfigurationError(
            f"{path}: no such file; a vllm_backend model keeps vLLM's engine arguments "
            '(at least "model") in <version>/model.json'
        ) from None
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConfigurationError(f"{path}: not JSON ({error})") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{path}: must hold a JSON object")
    return value
