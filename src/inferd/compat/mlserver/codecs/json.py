"""JSON elements of BYTES tensors (the ``pd_json`` columns of PandasCodec), MLServer's
``mlserver.codecs.json``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from inferd.compat.mlserver.codecs.lists import as_list
from inferd.compat.mlserver.codecs.utils import InputOrOutput


class JSONEncoderWithArray(json.JSONEncoder):
    """Writes numpy arrays and scalars as JSON lists and numbers."""

    def default(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return obj.tolist()
        if isinstance(obj, np.floating):
            return float(obj)
        if isinstance(obj, np.integer):
            return int(obj)
        return super().default(obj)


def encode_to_json(value: Any, use_bytes: bool = True) -> str | bytes:
    text = json.dumps(
        value,
        ensure_ascii=False,
        allow_nan=False,
        indent=None,
        separators=(",", ":"),
        cls=JSONEncoderWithArray,
    )
    return text.encode("utf-8") if use_bytes else text


def decode_json_input_or_output(input_or_output: InputOrOutput) -> list[Any]:
    return [json.loads(item) for item in as_list(input_or_output.data.root)]
