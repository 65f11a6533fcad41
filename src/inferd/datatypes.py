"""The Open Inference Protocol datatypes and their numpy counterparts.

Every numeric tensor travels little-endian; BYTES tensors are numpy object arrays
whose elements are ``bytes``.
"""

from __future__ import annotations

import numpy as np

from .errors import InvalidRequest

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
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}

DATATYPES = tuple(NUMPY_BY_DATATYPE)

_DATATYPE_BY_KIND_AND_SIZE: dict[tuple[str, int], str] = {
    (dtype.kind, dtype.itemsize): name
    for name, dtype in NUMPY_BY_DATATYPE.items()
    if name != "BYTES"
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
    try:
        return _DATATYPE_BY_KIND_AND_SIZE[(dtype.kind, dtype.itemsize)]
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no Open Inference Protocol datatype") from None


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
