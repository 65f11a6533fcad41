"""Triton's classification extension: an output answered as its top classes.

A client that asks for an output with the parameter ``classification: k`` gets,
instead of its values, the k largest as BYTES strings ``"value:index"`` or
``"value:index:label"``, largest first (ties: the lower index first). As in
Triton, a model that batches is classified per row of the batch (shape
``[batch, k]``), any other over all its elements (shape ``[k]``); k is capped at
the elements there are; a row of more than MAX_ROW_ELEMENTS is refused, not
sorted (Triton's bound); only integer, FP32 and FP64 outputs can be classified;
values are written as C's ``std::to_string`` writes them (``0.500000``, ``3``).

Labels come from the file a declared output names with the parameter
``label_filename`` in model-settings (a Triton folder: its outputs'
``label_filename`` in config.pbtxt, and it batches when ``max_batch_size`` > 0, as
Triton reads it), one label per line, class index = line number; read once per model version
(:class:`Classifier`), relative to the model's folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferd.errors import ConfigurationError, InvalidRequest
from inferd.settings import ModelSettings
from inferd.tensors.datatypes import datatype_of
from inferd.triton.config import batches
from inferd.types import InferenceResponse, Tensor

LABEL_FILENAME = "label_filename"
_CLASSIFIABLE = frozenset(
    ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64")
)

# Triton's bound on the elements it sorts for one row's classes (classification.cc).
MAX_ROW_ELEMENTS = 1_000_000


class Classifier:
    """Classifies one model version's outputs: whether it batches, its outputs' labels."""

    __slots__ = ("batched", "labels")

    def __init__(self, settings: ModelSettings) -> None:
        self.labels: dict[str, list[str]] = {}
        own = settings.extra.get("triton_config")
        if own is not None:  # a Triton folder: its config.pbtxt says, as Triton reads it
            self.batched = int(own.get("max_batch_size", 0)) > 0
            files = {out["name"]: out.get(LABEL_FILENAME) for out in own.get("output", [])}
        else:
            self.batched = batches(settings)
            files = {
                out.name: (out.parameters or {}).get(LABEL_FILENAME) for out in settings.outputs
            }
        for name, filename in files.items():
            if filename:
                self.labels[name] = _read_labels(settings.folder / str(filename))

    def classified(self, response: InferenceResponse, counts: dict[str, int]) -> InferenceResponse:
        """``response`` with each output named in ``counts`` replaced by its top classes
        (a new response: the one given may be shared, by the response cache)."""
        outputs = [
            Tensor(tensor.name, self.top(tensor, counts[tensor.name]))
            if tensor.name in counts
            else tensor
            for tensor in response.outputs
        ]
        return InferenceResponse(
            outputs=outputs,
            model_name=response.model_name,
            model_version=response.model_version,
            id=response.id,
            parameters=response.parameters,
        )

    def top(self, tensor: Tensor, count: int) -> np.ndarray:
        """The top ``count`` classes of ``tensor`` as a BYTES array."""
        data = tensor.data
        datatype = datatype_of(data.dtype)
        if datatype not in _CLASSIFIABLE:
            raise InvalidRequest(
                f"Output {tensor.name!r}: class result not available for output due to "
                f"unsupported type '{datatype}'"
            )
        batched = self.batched and data.ndim > 0
        rows = data.reshape(data.shape[0], -1) if batched else data.reshape(1, -1)
        if rows.shape[1] > MAX_ROW_ELEMENTS:
            raise InvalidRequest(
                f"classification output tensor too large: output {tensor.name!r} has "
                f"{rows.shape[1]} elements per {'batch row' if batched else 'answer'}, "
                f"more than the {MAX_ROW_ELEMENTS} a classification sorts"
            )
        count = min(count, rows.shape[1])
        order = _largest_first(rows)[:, :count]
        labels = self.labels.get(tensor.name, ())
        integer = data.dtype.kind in "iu"
        texts = np.empty(order.shape, dtype=object)
        for row, indexes in enumerate(order):
            for place, index in enumerate(indexes.tolist()):
                value = rows[row, index]
                text = f"{int(value)}:{index}" if integer else f"{float(value):f}:{index}"
                if index < len(labels):
                    text += f":{labels[index]}"
                texts[row, place] = text.encode()
        return texts if batched else texts.reshape(-1)


def _largest_first(rows: np.ndarray) -> np.ndarray:
    """Each row's indexes by value, largest first, ties in index order: a stable
    ascending sort of the reversed row, read backwards (no negation: unsigned)."""
    width = rows.shape[1]
    ascending = np.argsort(rows[:, ::-1], axis=1, kind="stable")
    return np.asarray(width - 1 - ascending[:, ::-1])


def _read_labels(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise ConfigurationError(
            f"Cannot read the label file {str(path)!r} an output's label_filename names: "
            f"{error.strerror or error}"
        ) from None
