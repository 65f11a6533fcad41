"""MLServer's content types: Python values <-> request and response tensors.

A content type says how a tensor (``tensor.parameters["content_type"]``) or a
whole request (``request.parameters["content_type"]``) is meant to be read:

=============  ============================================================
``np``         the numpy array as it is (the default for every tensor)
``str``        BYTES elements as UTF-8 text: a flat ``list[str]``
``base64``     BYTES elements base64-decoded: a flat ``list[bytes]``
``datetime``   BYTES elements as ISO 8601 text: a flat ``list[datetime]``
``pd_json``    BYTES elements as JSON documents: a flat list of values
``pd``         request level: a pandas DataFrame, one column per input
=============  ============================================================

Encoding follows MLServer's codecs so MLServer clients read our answers the
same way: a 1-D result of n rows is sent with shape ``[n, 1]`` (MLServer's
``inject_batch_dimension``), lists of text become BYTES ``[n, 1]`` tagged
``str``, and a DataFrame becomes one output per column. Numeric data is never
walked element by element; only BYTES, text and date elements are, since each
of those is a separate Python object anyway.

pandas is optional: it is imported only when a ``pd`` request arrives, and a
DataFrame can only be returned by a runtime that already imported it.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from inferd.errors import InvalidRequest
from inferd.tensors.encoding import to_output_array
from inferd.types import InferenceRequest, Tensor

NUMPY = "np"
STRING = "str"
BASE64 = "base64"
DATETIME = "datetime"
PANDAS = "pd"
PANDAS_JSON = "pd_json"
CONTENT_TYPES = (NUMPY, STRING, BASE64, DATETIME, PANDAS, PANDAS_JSON)

DEFAULT_OUTPUT_NAME = "output-1"
"""Name of the one output made from a bare array or list (MLServer's NumpyRequestCodec)."""

_PANDAS_HINT = "pandas is not installed on the server; install it with: pip install inferd[pandas]"


# --- decoding -----------------------------------------------------------------


def _text(item: Any) -> str:
    if isinstance(item, bytes):
        return item.decode("utf-8")
    if isinstance(item, str):
        return item
    raise TypeError(f"expected bytes, got {type(item).__name__}")


def _base64(item: Any) -> bytes:
    # validate=True: refuse non-alphabet characters instead of silently dropping them.
    return base64.b64decode(item, validate=True)


def _datetime(item: Any) -> dt.datetime:
    return dt.datetime.fromisoformat(_text(item))


def _json(item: Any) -> Any:
    return json.loads(item)


# content type -> (decoder of one element, what a valid element is, for messages)
_ELEMENT_DECODERS: dict[str, tuple[Callable[[Any], Any], str]] = {
    STRING: (_text, "UTF-8 text"),
    BASE64: (_base64, "base64"),
    DATETIME: (_datetime, "an ISO 8601 date/time"),
    PANDAS_JSON: (_json, "a JSON document"),
}


def decode_tensor(tensor: Tensor, default: str | None = None) -> Any:
    """``tensor`` as Python data, by its content type, else ``default``, else ``np``.

    ``pd`` is a request-level content type; on a single tensor it means ``np``.
    """
    content_type = tensor.content_type or default
    if content_type is None or content_type in (NUMPY, PANDAS):
        return tensor.data
    if content_type not in _ELEMENT_DECODERS:
        raise InvalidRequest(
            f"Input {tensor.name!r}: unknown content type {content_type!r}; "
            f"expected one of {', '.join(CONTENT_TYPES)}"
        )
    if tensor.data.dtype.kind != "O":
        raise InvalidRequest(
            f"Input {tensor.name!r}: content type {content_type!r} needs a BYTES tensor, "
            f"got {tensor.datatype}; send BYTES data or leave out the content type"
        )
    return _decode_elements(tensor, *_ELEMENT_DECODERS[content_type])


def _decode_elements(tensor: Tensor, decode: Callable[[Any], Any], expected: str) -> list[Any]:
    decoded = []
    for index, item in enumerate(tensor.data.reshape(-1).tolist()):
        try:
            decoded.append(decode(item))
        # UnicodeDecodeError and binascii.Error are ValueErrors; RecursionError is
        # json.loads on a document nested too deeply.
        except (ValueError, TypeError, RecursionError) as error:
            raise InvalidRequest(
                f"Input {tensor.name!r}: element {index} is not {expected} ({error})"
            ) from None
    return decoded


def decode_request(request: InferenceRequest, default: str | None = None) -> Any:
    """The whole request as Python data.

    With content type ``pd`` (the request's, else ``default``): a DataFrame with
    one column per input. Otherwise the one input decoded, or a dict of decoded
    inputs by name; a request-level ``np``/``str``/... acts as every input's
    default, as MLServer's NumpyRequestCodec and StringRequestCodec do.
    """
    content_type = request.content_type or default
    if content_type == PANDAS:
        return _decode_dataframe(request)
    if len(request.inputs) == 1:
        return decode_tensor(request.inputs[0], content_type)
    return {tensor.name: decode_tensor(tensor, content_type) for tensor in request.inputs}


def _import_pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise InvalidRequest(f"Content type 'pd' needs pandas: {_PANDAS_HINT}") from None
    return pandas


def _decode_dataframe(request: InferenceRequest) -> Any:
    pandas = _import_pandas()
    columns: dict[str, Any] = {}
    for tensor in request.inputs:
        if tensor.name in columns:
            raise InvalidRequest(f"Input {tensor.name!r} appears twice; each column needs a name")
        columns[tensor.name] = _column_values(tensor)
    _check_same_rows(columns)
    return pandas.DataFrame(columns)


def _column_values(tensor: Tensor) -> Any:
    """One input as one DataFrame column.

    MLServer's PandasCodec also maps each input to one column and cannot turn a
    ``[n, k]`` input (k > 1) into a column (it fails or misaligns rows), so such
    inputs are refused with a hint instead of inventing column names.
    """
    shape = tensor.shape
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
        raise InvalidRequest(
            f"Input {tensor.name!r}: shape {list(shape)} cannot be one DataFrame column; "
            "with content type 'pd' every input is one column of shape [n] or [n, 1]: "
            "send k features as k inputs, or leave out content type 'pd' to send one "
            "[n, k] array"
        )
    if tensor.content_type is None and tensor.data.dtype.kind == "O":
        return _text_or_bytes(tensor.data)
    values = decode_tensor(tensor)
    return values.reshape(-1) if isinstance(values, np.ndarray) else values


def _text_or_bytes(data: np.ndarray) -> list[Any]:
    """An untagged BYTES column: text when it is UTF-8, else bytes.

    MLServer hands REST clients' untagged BYTES columns to the model as str, so
    a model trained on string categories keeps working when the client does not
    set content type ``str``.
    """
    items = data.reshape(-1).tolist()
    try:
        return [_text(item) for item in items]
    except (UnicodeDecodeError, TypeError):
        return list(items)


def _check_same_rows(columns: dict[str, Any]) -> None:
    rows = {name: len(values) for name, values in columns.items()}
    if len(set(rows.values())) > 1:
        counts = ", ".join(f"{name!r}: {count}" for name, count in rows.items())
        raise InvalidRequest(
            f"Inputs of a 'pd' request are the columns of one table and need the same "
            f"number of rows; got {counts}"
        )


# --- encoding -----------------------------------------------------------------


def _object_array(value: Any) -> np.ndarray:
    """An object array of ``value``'s items; never numpy's fixed-width S/U types,
    which would drop trailing NUL bytes."""
    if isinstance(value, np.ndarray):
        return value if value.dtype.kind == "O" else value.astype(object)
    if isinstance(value, (str, bytes)):
        value = [value]
    return np.array(value, dtype=object)


def _map_elements(array: np.ndarray, function: Callable[[Any], Any]) -> np.ndarray:
    mapped = np.empty(array.shape, dtype=object)
    mapped.reshape(-1)[:] = [function(item) for item in array.reshape(-1).tolist()]
    return mapped


def _to_bytes(item: Any) -> bytes:
    return item if isinstance(item, bytes) else str(item).encode("utf-8")


def _encode_numpy(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if _first_item(value, (str, bytes)):
        return _object_array(value)
    return np.asarray(value)


def _encode_text(value: Any) -> np.ndarray:
    return _object_array(value)  # to_output_array encodes str elements as UTF-8


def _encode_base64(value: Any) -> np.ndarray:
    return _map_elements(_object_array(value), lambda item: base64.b64encode(_to_bytes(item)))


def _encode_datetime(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype.kind == "M":
        return np.datetime_as_string(value)
    # Strings pass through as already ISO-formatted, as in MLServer's DatetimeCodec.
    return _map_elements(
        _object_array(value), lambda item: item if isinstance(item, str) else item.isoformat()
    )


def _encode_json(value: Any) -> np.ndarray:
    return _map_elements(_object_array(value), _json_bytes)


def _json_bytes(item: Any) -> bytes:
    if isinstance(item, float) and item != item:  # NaN is not JSON; MLServer sends null
        item = None
    return json.dumps(item, default=_json_default, separators=(",", ":")).encode("utf-8")


def _json_default(item: Any) -> Any:
    if isinstance(item, (np.generic, np.ndarray)):
        return item.tolist()
    if isinstance(item, bytes):
        return item.decode("utf-8", errors="replace")
    raise TypeError(f"{type(item).__name__} cannot be written as JSON")


_ENCODERS: dict[str, Callable[[Any], np.ndarray]] = {
    NUMPY: _encode_numpy,
    STRING: _encode_text,
    BASE64: _encode_base64,
    DATETIME: _encode_datetime,
    PANDAS_JSON: _encode_json,
}


def _first_item(value: Any, types: type | tuple[type, ...]) -> bool:
    """Whether ``value``'s first element is one of ``types`` (O(1): lists are
    assumed uniform, as MLServer's codecs assume)."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "O" and value.size > 0 and isinstance(value.flat[0], types)
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], types)


def _guess_content_type(value: Any) -> str:
    if isinstance(value, str):
        return STRING
    if isinstance(value, np.ndarray) and value.dtype.kind in "UM":
        return STRING if value.dtype.kind == "U" else DATETIME
    if _first_item(value, str):
        return STRING
    if _first_item(value, dt.date):  # datetime is a date too
        return DATETIME
    return NUMPY


def _with_batch_dimension(array: np.ndarray) -> np.ndarray:
    """MLServer's ``inject_batch_dimension``: ``[n]`` is sent as ``[n, 1]``, ``[]`` as ``[1]``."""
    if array.ndim == 0:
        return array.reshape(1)
    if array.ndim == 1:
        return array.reshape(-1, 1)
    return array


def encode_tensor(name: str, value: Any, content_type: str | None = None) -> Tensor:
    """One output tensor named ``name`` holding ``value``.

    ``value`` may be a numpy array, a list (or scalar) of numbers, str, bytes or
    datetimes. Without ``content_type`` it is chosen from the value: text ->
    ``str``, datetimes -> ``datetime``, anything else ``np`` (left untagged).
    ``base64`` encodes each element; it is never guessed, so a list of bytes is
    sent as raw BYTES unless asked.
    """
    if content_type is None or content_type == PANDAS:
        content_type = _guess_content_type(value)
    encoder = _ENCODERS.get(content_type)
    if encoder is None:
        raise InvalidRequest(
            f"Output {name!r}: unknown content type {content_type!r}; "
            f"expected one of {', '.join(_ENCODERS)}"
        )
    array = _with_batch_dimension(to_output_array(encoder(value)))
    parameters = {} if content_type == NUMPY else {"content_type": content_type}
    return Tensor(name, array, parameters)


def encode_outputs(value: Any, content_type: str | None = None) -> list[Tensor]:
    """Response outputs for what a runtime returned.

    A DataFrame gives one output per column (MLServer's PandasCodec); a dict
    one output per key; anything else one output named ``output-1``.
    """
    if is_dataframe(value):
        return [_encode_column(str(column), series) for column, series in value.items()]
    if isinstance(value, dict):
        return [encode_tensor(str(key), item, content_type) for key, item in value.items()]
    return [encode_tensor(DEFAULT_OUTPUT_NAME, value, content_type)]


def is_dataframe(value: Any) -> bool:
    # A DataFrame can only exist once pandas is imported: never import it here.
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(value, pandas.DataFrame)


def _encode_column(name: str, series: Any) -> Tensor:
    """One DataFrame column as an output of shape ``[n, 1]``, as MLServer's PandasCodec:
    numbers keep their dtype, text is BYTES ``str``, other objects BYTES ``pd_json``."""
    pandas = sys.modules["pandas"]
    dtype = series.dtype
    if pandas.api.types.is_datetime64_any_dtype(dtype):
        return encode_tensor(name, list(series), DATETIME)
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":
        return encode_tensor(name, series.to_numpy(), NUMPY)
    if pandas.api.types.is_numeric_dtype(dtype) or pandas.api.types.is_bool_dtype(dtype):
        return encode_tensor(name, _nullable_to_numpy(series), NUMPY)
    values = series.to_numpy()
    if values.dtype.kind in "biuf":  # e.g. a category column of numbers
        return encode_tensor(name, values, NUMPY)
    items = values.tolist()
    if all(isinstance(item, (str, bytes)) for item in items):
        return encode_tensor(name, _object_array(values), STRING)
    return encode_tensor(name, _object_array(values), PANDAS_JSON)


def _nullable_to_numpy(series: Any) -> np.ndarray:
    """A pandas nullable column (Int64, boolean, ...) as numpy; missing values become NaN."""
    if series.hasnans:
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    return series.to_numpy(dtype=series.dtype.numpy_dtype)
