"""``pb_utils.Tensor``, ``InferenceResponse``, ``TritonError``: Triton's Python-backend
objects over inferd's numpy tensors.

A ``Tensor`` wraps its numpy array without copying; a response's tensors keep
their own dtype on the wire (an INT64 output stays INT64 whatever the config says,
as in Triton). CPU memory only: ``to_dlpack``/``from_dlpack`` work where numpy's
DLPack support does (CPU arrays).
"""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any

import numpy as np

from inferd.errors import InferdError, InvalidRequest, ModelError, ModelNotFound, ModelNotReady
from inferd.settings.warmup import TRITON_DATATYPES
from inferd.tensors.datatypes import NUMPY_BY_DATATYPE, datatype_of
from inferd.types import Tensor as InferdTensor


class TritonModelException(Exception):
    """Raised by pb_utils for a misuse; a model may raise it too (the request fails)."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class TritonError:
    """An error a response carries (``InferenceResponse(error=TritonError(...))``)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


def error_of(error: BaseException) -> TritonError:
    """The TritonError a failed call answers with, its code from inferd's error."""
    message = getattr(error, "message", None) or str(error)
    if not isinstance(message, str):
        message = str(error)
    if isinstance(error, concurrent.futures.CancelledError):
        return TritonError("The request was cancelled", TritonError.CANCELLED)
    if isinstance(error, ModelNotFound):
        return TritonError(message, TritonError.NOT_FOUND)
    if isinstance(error, InvalidRequest):
        return TritonError(message, TritonError.INVALID_ARG)
    if isinstance(error, ModelNotReady):
        return TritonError(message, TritonError.UNAVAILABLE)
    return TritonError(message, TritonError.INTERNAL)


def raised_for(error: TritonError) -> InferdError:
    """The inferd error a response's TritonError fails its client's request with."""
    if error.code() in (TritonError.INVALID_ARG, TritonError.UNSUPPORTED):
        return InvalidRequest(error.message())
    if error.code() == TritonError.NOT_FOUND:
        return InvalidRequest(error.message())
    return ModelError(error.message())


class _Capsule:
    """A bare DLPack capsule as numpy's ``from_dlpack`` wants it (an object with
    ``__dlpack__``): capsules come from CPU producers (CPU memory only here)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


class Tensor:
    """A named tensor of a request or a response."""

    def __init__(self, name: str, numpy_array: Any, triton_dtype: int | None = None) -> None:
        array = np.asarray(numpy_array)
        if array.dtype.kind in "US":  # Triton refuses these; their bytes are what it means
            array = np.vectorize(_as_bytes, otypes=[object])(array) if array.size else array
            array = array.astype(object)
        elif array.dtype.kind == "V" and array.dtype not in NUMPY_BY_DATATYPE.values():
            raise TritonModelException(
                f"Tensor {name!r}: dtype {array.dtype} is not supported by the Python backend; "
                "use np.object_ for bytes"
            )
        self._name = name
        self._array = array

    @classmethod
    def of(cls, tensor: InferdTensor) -> Tensor:
        return cls(tensor.name, tensor.data)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        return triton_type_number(datatype_of(self._array.dtype))

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        array = self._array
        if not array.flags.writeable:  # DLPack has no read-only flag numpy can export
            array = array.copy()
        return array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            return Tensor(name, np.from_dlpack(source))
        except (BufferError, RuntimeError, TypeError) as error:
            raise TritonModelException(
                f"Tensor {name!r}: from_dlpack takes CPU tensors only here: {error}"
            ) from None

    def to_inferd(self) -> InferdTensor:
        return InferdTensor(self._name, self._array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._array!r})"


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


class InferenceResponse:
    """One response: output tensors, or an error."""

    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        output_tensors = [] if output_tensors is None else output_tensors
        if not isinstance(output_tensors, list):
            raise TritonModelException('"output_tensors" must be a list.')
        self._outputs = output_tensors
        self._error = error
        self._parameters = json.loads(parameters) if isinstance(parameters, str) else parameters

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters or {})

    def parameter_dict(self) -> dict[str, Any]:
        return dict(self._parameters or {})


# Triton's DataType enum numbers, in its TYPE_* order.
_TYPE_NUMBERS = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}


def triton_type_number(datatype: str) -> int:
    return _TYPE_NUMBERS[datatype]


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """The numpy type of a ``TYPE_*`` name (``TYPE_STRING``: ``np.object_``)."""
    datatype = TRITON_DATATYPES.get(triton_type_string)
    if datatype is None:
        raise TritonModelException(f"Unknown Triton data type {triton_type_string!r}")
    if datatype == "BOOL":
        return bool
    dtype = NUMPY_BY_DATATYPE[datatype]
    return np.object_ if datatype == "BYTES" else dtype.type
