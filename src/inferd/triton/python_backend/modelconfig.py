"""The model configuration as pb_utils gives it: ``ModelConfig`` (what
``auto_complete_config`` completes) and the ``get_*_config_by_name`` helpers."""

from __future__ import annotations

import copy
from typing import Any

from inferd.triton.python_backend.tensor import TritonModelException

_TENSOR_KEYS = ("name", "data_type", "dims")


class ModelConfig:
    """A model's configuration (Triton's JSON form) that ``auto_complete_config``
    may complete: what ``config.pbtxt`` sets wins over what the model adds."""

    def __init__(self, model_config: dict[str, Any]) -> None:
        self._config = copy.deepcopy(model_config)

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 0:
            raise TritonModelException("max_batch_size must be a whole number, 0 or more")
        current = self._config.get("max_batch_size", 0)
        if current and current != max_batch_size:
            raise TritonModelException(
                f"set_max_batch_size({max_batch_size}): config.pbtxt sets max_batch_size "
                f"to {current}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy: dict[str, Any]) -> None:
        unknown = set(transaction_policy) - {"decoupled"}
        if unknown:
            raise TritonModelException(
                f"model_transaction_policy: unknown keys {sorted(unknown)}; only 'decoupled'"
            )
        policy = self._config.setdefault("model_transaction_policy", {})
        if "decoupled" in policy and policy["decoupled"] != transaction_policy.get("decoupled"):
            raise TritonModelException(
                "set_model_transaction_policy: config.pbtxt sets decoupled "
                f"to {policy['decoupled']}"
            )
        policy.update(transaction_policy)

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output)

    def _add(self, kind: str, tensor: dict[str, Any]) -> None:
        if not isinstance(tensor, dict) or any(key not in tensor for key in _TENSOR_KEYS):
            raise TritonModelException(
                f"add_{kind}: an {kind} is a dict with 'name', 'data_type' and 'dims', "
                f"got {tensor!r}"
            )
        tensors = self._config.setdefault(kind, [])
        for existing in tensors:
            if existing.get("name") != tensor["name"]:
                continue
            for key in ("data_type", "dims"):
                if key in existing and _same(key, existing[key], tensor[key]) is False:
                    raise TritonModelException(
                        f"add_{kind}: {kind} {tensor['name']!r} has {key} {existing[key]!r} in "
                        f"config.pbtxt, not {tensor[key]!r}"
                    )
                existing.setdefault(key, tensor[key])
            return
        tensors.append(dict(tensor, dims=[int(d) for d in tensor["dims"]]))


def _same(key: str, ours: Any, theirs: Any) -> bool:
    if key == "dims":
        return [int(d) for d in ours] == [int(d) for d in theirs]
    return bool(ours == theirs)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return _by_name(model_config.get("input", []), name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return _by_name(model_config.get("output", []), name)


def _by_name(tensors: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    for tensor in tensors:
        if tensor.get("name") == name:
            return tensor
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
