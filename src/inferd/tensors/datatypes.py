"""The Open Inference Protocol datatypes and their numpy counterparts.

Every numeric tensor travels little-endian; BYTES tensors are numpy object arrays
whose elements are ``bytes``. BF16 has no numpy dtype of its own: it is
``ml_dtypes.bfloat16`` (the dtype JAX and TensorFlow use), so BF16 tensors reach
models bit for bit and a model returns BF16 by returning such an array.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from inferd.errors import InvalidRequest

NUMPY_BY_DATATYPE: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}

DATATYPES = tuple(NUMPY_BY_DATATYPE)

BF16_DTYPE = NUMPY_BY_DATATYPE["BF16"]

_DATATYPE_BY_KIND_AND_SIZE: dict[tuple[str, int], str] = {
    (dtype.kind, dtype.itemsize): name
    for name, dtype in NUMPY_BY_DATATYPE.items()
    if name not in ("BYTES", "BF16")  # bfloat16's kind is "V", shared with raw bytes
}


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype of a V2 datatype; InvalidRequest for an unknown name."""
    try:
        return NUMPY_BY_DATATYPE[datatype]
    except KeyError:
        raise InvalidRequest(
            f"Unsupported datatype {datatype!r}; expected one of {', '.join(DATATYPES)}"
        ) from None


def datatype_of(dtype: np.dtype) -> str:
    """The V2 datatype that carries arrays of ``dtype``."""
    if dtype.kind in "OSU":
        return "BYTES"
    if dtype == BF16_DTYPE:
        return "BF16"
    try:
        return _DATATYPE_BY_KIND_AND_SIZE[(dtype.kind, dtype.itemsize)]
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no Open Inference Protocol datatype") from None


def is_floating(dtype: np.dtype) -> bool:
    """FP16/32/64 and BF16 (which numpy does not count as a float kind)."""
    return dtype.kind == "f" or dtype == BF16_DTYPE


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
