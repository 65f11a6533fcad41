"""The protocol's parameter maps (``map<string, InferParameter>``) <-> Python values.

Hand-written beside the generated messages because both the server's gRPC codec
and the client tools (``inferd infer``, ``inferd bench``) speak them: one mapping,
so what a tool sends is what the server reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from inferd.protocol import pb

InferParameters = Mapping[str, pb.InferParameter]

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


def decode_parameters(parameters: InferParameters) -> dict[str, Any]:
    """The map's values as Python scalars; entries with no value set are dropped."""
    decoded: dict[str, Any] = {}
    for key, parameter in parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        if which is not None:
            decoded[key] = getattr(parameter, which)
    return decoded


def encode_parameters(parameters: Mapping[str, Any]) -> dict[str, pb.InferParameter]:
    """Python values as InferParameters; None is dropped, lists and dicts go as JSON text."""
    encoded = {}
    for key, value in parameters.items():
        parameter = _encode_parameter(value)
        if parameter is not None:
            encoded[key] = parameter
    return encoded


def _encode_parameter(value: Any) -> pb.InferParameter | None:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return None
    if isinstance(value, bool):
        return pb.InferParameter(bool_param=value)
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return pb.InferParameter(int64_param=value)
        if 0 <= value <= _UINT64_MAX:
            return pb.InferParameter(uint64_param=value)
        return pb.InferParameter(string_param=str(value))
    if isinstance(value, float):
        return pb.InferParameter(double_param=value)
    if isinstance(value, str):
        return pb.InferParameter(string_param=value)
    # The protocol has no list or map parameter; JSON text keeps the value readable.
    return pb.InferParameter(string_param=json.dumps(value, default=str))
