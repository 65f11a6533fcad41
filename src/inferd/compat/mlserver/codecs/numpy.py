"""NumPy arrays (content type ``np``), MLServer's ``mlserver.codecs.numpy``.

Unlike MLServer, an encoded output keeps its data as a flat numpy array (a view,
no copy) instead of a Python list: inferd sends it to the wire straight from
there, and ``model_dump`` still shows a list.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.compat.construct import construct
from inferd.compat.mlserver.codecs.base import (
    InputCodec,
    register_input_codec,
    register_request_codec,
)
from inferd.compat.mlserver.codecs.lists import is_list_of
from inferd.compat.mlserver.codecs.utils import (
    InputOrOutput,
    SingleInputRequestCodec,
    inject_batch_dimension,
)
from inferd.compat.mlserver.types import (
    Datatype,
    Parameters,
    RequestInput,
    ResponseOutput,
    TensorData,
)

_NUMPY_BY_DATATYPE = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}
_DATATYPE_BY_NUMPY = {numpy: Datatype(datatype) for datatype, numpy in _NUMPY_BY_DATATYPE.items()}
_DATATYPE_BY_DTYPE = {np.dtype(numpy): datatype for numpy, datatype in _DATATYPE_BY_NUMPY.items()}


def _datatype_name(datatype: Any) -> str:
    return datatype.value if isinstance(datatype, Datatype) else str(datatype)


def to_dtype(input_or_output: InputOrOutput) -> np.dtype:
    """The numpy dtype of a tensor's data: str for BYTES text, object for BYTES bytes."""
    datatype = _datatype_name(input_or_output.datatype)
    if datatype == "BYTES":
        data = getattr(input_or_output.data, "root", input_or_output.data)
        return np.dtype(str) if is_list_of(data, str) else np.dtype(object)
    return np.dtype(_NUMPY_BY_DATATYPE[datatype])


def to_datatype(dtype: np.dtype) -> Datatype:
    """The protocol datatype that carries ``dtype`` (text, bytes and objects: BYTES)."""
    found = _DATATYPE_BY_DTYPE.get(dtype)  # native byte order only, as MLServer's str(dtype)
    if found is not None and dtype.byteorder in "=|":
        return found
    if dtype.kind in "OSU":
        return Datatype.BYTES
    raise KeyError(str(dtype))


def _to_ndarray(input_or_output: InputOrOutput) -> np.ndarray:
    data = getattr(input_or_output.data, "root", input_or_output.data)
    if _datatype_name(input_or_output.datatype) == "BYTES":
        if isinstance(data, np.ndarray):
            return data
        array = np.empty(len(data), dtype=to_dtype(input_or_output))
        array[:] = data
        return array
    return np.asarray(data, dtype=to_dtype(input_or_output))


def _encode_data(array: np.ndarray, datatype: Datatype) -> Any:
    if datatype == Datatype.BYTES:
        if array.dtype.kind == "U":
            return [item.encode("utf-8") for item in array.reshape(-1).tolist()]
        if array.dtype.kind == "S":
            return [array.tobytes()]
        return array.reshape(-1).tolist()
    return array.reshape(-1)


def convert_nan(value: Any) -> Any:
    """NaN as None (JSON has no NaN); other values as they are."""
    return None if isinstance(value, float) and value != value else value


@register_input_codec
class NumpyCodec(InputCodec):
    """A request input (response output) as a NumPy array of the tensor's shape."""

    ContentType = "np"
    TypeHint = np.ndarray

    @classmethod
    def can_encode(cls, payload: Any) -> bool:
        return isinstance(payload, np.ndarray)

    @classmethod
    def encode_output(cls, name: str, payload: np.ndarray, **kwargs: Any) -> ResponseOutput:
        datatype = to_datatype(payload.dtype)
        values = {
            "name": name,
            "datatype": datatype.value,
            "shape": inject_batch_dimension(list(payload.shape)),
            "data": construct(TensorData, {"root": _encode_data(payload, datatype)}),
            "parameters": construct(Parameters, {"content_type": cls.ContentType}),
        }
        return construct(ResponseOutput, values)

    @classmethod
    def decode_output(cls, response_output: ResponseOutput) -> np.ndarray:
        return cls.decode_input(response_output)  # type: ignore[arg-type]

    @classmethod
    def encode_input(cls, name: str, payload: np.ndarray, **kwargs: Any) -> RequestInput:
        output = cls.encode_output(name=name, payload=payload)
        values = {
            "name": output.name,
            "datatype": output.datatype,
            "shape": output.shape,
            "data": output.data,
            "parameters": construct(Parameters, {"content_type": cls.ContentType}),
        }
        return construct(RequestInput, values)

    @classmethod
    def decode_input(cls, request_input: RequestInput) -> np.ndarray:
        return _to_ndarray(request_input).reshape(request_input.shape)


@register_request_codec
class NumpyRequestCodec(SingleInputRequestCodec):
    """The request's one input (the response's one output) as a NumPy array."""

    InputCodec = NumpyCodec
    ContentType = NumpyCodec.ContentType
