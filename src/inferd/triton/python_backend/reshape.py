"""``reshape`` in config.pbtxt: the shape the model sees, where the client's is ``dims``.

An input with ``reshape { shape }`` reaches ``execute`` in that shape (after the
batch dimension, when the model batches); an output with one is answered in its
``dims``. Both are views of the same array (numpy's reshape, no copy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.errors import InvalidRequest, ModelError


class Reshapes:
    def __init__(self, config: dict[str, Any]) -> None:
        self._batched = config.get("max_batch_size", 0) > 0
        self._inputs = {
            t["name"]: tuple(t["reshape"].get("shape", ()))
            for t in config.get("input", [])
            if "reshape" in t
        }
        self._outputs = {
            t["name"]: tuple(t.get("dims", ())) for t in config.get("output", []) if "reshape" in t
        }

    def input(self, name: str, array: np.ndarray) -> np.ndarray:
        shape = self._inputs.get(name)
        if shape is None:
            return array
        try:
            return self._reshaped(array, shape)
        except ValueError:
            raise InvalidRequest(
                f"Input {name!r} of shape {list(array.shape)} cannot take the shape "
                f"{list(shape)} its reshape gives it"
            ) from None

    def output(self, name: str, array: np.ndarray) -> np.ndarray:
        dims = self._outputs.get(name)
        if dims is None:
            return array
        try:
            return self._reshaped(array, dims)
        except ValueError:
            raise ModelError(
                f"Output {name!r} of shape {list(array.shape)} cannot take its dims {list(dims)}"
            ) from None

    def _reshaped(self, array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if self._batched:
            if not array.shape:
                raise ValueError("no batch dimension")
            return array.reshape((array.shape[0], *shape))
        return array.reshape(shape)
