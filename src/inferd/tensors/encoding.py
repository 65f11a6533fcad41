"""numpy arrays <-> the Open Inference Protocol's wire representations.

Shared by the REST server (JSON ``data`` and the binary tensor extension), the
gRPC server (typed and raw contents) and worker IPC. Every conversion is one
numpy call for numeric tensors; only BYTES tensors, whose elements are separate
Python objects anyway, are walked element by element.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.errors import InvalidRequest
from inferd.tensors.datatypes import datatype_of, element_count, is_floating, numpy_dtype

_LENGTH_PREFIX = struct.Struct("<I")
_INTEGER_KINDS = "iu"
# BYTES tensors: object arrays of bytes, or numpy text arrays a runtime returned as is.
_TEXT_KINDS = "OSU"
_FLOAT64_MAX = float(np.finfo(np.float64).max)


MAX_DIMENSIONS = 32
"""Dimensions a tensor may have: numpy 1.x's limit (2.x allows 64), and what pickle
and every framework take."""
MAX_EXTENT = 2**48
"""Bound on the product of a shape's non-zero dimensions: numpy refuses shapes whose
size overflows, even with a 0 elsewhere in them."""


def check_shape(name: str, shape: Sequence[Any]) -> tuple[int, ...]:
    dims = tuple(shape)  # read once: a protobuf repeated field makes an int per read
    extent = 1
    for dim in dims:
        if type(dim) is not int or dim < 0:
            raise InvalidRequest(
                f"Input {name!r}: shape {list(dims)} must be a list of non-negative integers"
            )
        extent *= dim or 1
    if len(dims) > MAX_DIMENSIONS:
        raise InvalidRequest(
            f"Input {name!r}: shape has {len(dims)} dimensions; at most {MAX_DIMENSIONS}"
        )
    if extent > MAX_EXTENT:
        raise InvalidRequest(f"Input {name!r}: shape {list(dims)} is too large for a tensor")
    return dims


def array_from_json(
    name: str, datatype: str, shape: Sequence[int], data: Any, *, match_nesting: bool = True
) -> np.ndarray:
    """Decode a tensor's JSON ``data`` into an array of ``shape``.

    Flat data needs only the shape's element count. Nested data must nest exactly as
    ``shape`` at every level, unless ``match_nesting`` is off (for callers that lay
    nested values out in a shape of their own choosing): a ``[1, 4]`` input sent as
    ``[[1, 2], [3, 4]]`` is a client's mistake, not four values.
    """
    dtype = numpy_dtype(datatype)
    dims = check_shape(name, shape)
    if datatype == "BYTES":
        return _bytes_from_json(name, dims, data, match_nesting)
    try:
        array = np.asarray(data)
    except ValueError:
        raise InvalidRequest(
            f"Input {name!r}: data is a ragged nested list or nests more than numpy's "
            "64 dimensions; send it flat or as a rectangular list"
        ) from None
    # numpy read the nesting already: comparing two tuples is all the check costs.
    if array.ndim > 1 and match_nesting and array.shape != dims:
        raise _nesting_error(name, dims, array.shape)
    _check_size(name, dims, array.size)
    if array.dtype.kind == "f" and dtype.kind in _INTEGER_KINDS:
        # numpy turns a mix of int64 and uint64 values (0 and 2**64 - 1) into
        # floats, losing precision: look at the exact Python values instead.
        array = np.asarray(data, dtype=object)
    if array.size:
        _check_values(name, datatype, dtype, array)
    if not (is_floating(dtype) and dtype.itemsize < 8 and array.size):
        return array.astype(dtype, copy=False).reshape(dims)
    # JSON has no infinity, so one here means a number too large for the datatype.
    with np.errstate(over="ignore"):
        narrowed = array.astype(dtype)
    if not np.isfinite(narrowed).all():
        raise InvalidRequest(f"Input {name!r}: values out of range for {datatype}")
    return narrowed.reshape(dims)


def _nesting_error(name: str, shape: tuple[int, ...], nested: tuple[int, ...] | None) -> Exception:
    holds = "is ragged" if nested is None else f"nests as {list(nested)}"
    return InvalidRequest(
        f"Input {name!r}: shape {list(shape)} does not match its nested data, which {holds}; "
        "nest the data exactly as the shape, or send it flat"
    )


def _check_size(name: str, shape: tuple[int, ...], size: int) -> None:
    expected = element_count(shape)
    if size != expected:
        raise InvalidRequest(
            f"Input {name!r}: shape {list(shape)} needs {expected} elements, data has {size}"
        )


def _check_values(name: str, datatype: str, dtype: np.dtype, array: np.ndarray) -> None:
    """Refuse data that would change meaning when cast to ``dtype``."""
    kind = array.dtype.kind
    if kind == "O":
        _check_big_numbers(name, datatype, dtype, array)
        return
    if dtype.kind == "b":
        if kind == "b" or (kind in _INTEGER_KINDS and np.isin(array, (0, 1)).all()):
            return
        raise InvalidRequest(f"Input {name!r}: BOOL data must be true/false")
    if is_floating(dtype):
        if kind in "fiub":
            return
        raise InvalidRequest(f"Input {name!r}: {datatype} data must be numbers")
    if kind not in _INTEGER_KINDS:
        raise InvalidRequest(f"Input {name!r}: {datatype} data must be integers")
    info = np.iinfo(dtype)
    if array.min() < info.min or array.max() > info.max:
        raise InvalidRequest(
            f"Input {name!r}: values out of range for {datatype} ({info.min}..{info.max})"
        )


def _check_big_numbers(name: str, datatype: str, dtype: np.dtype, array: np.ndarray) -> None:
    """Check data numpy kept as Python objects: big integers, ``null``s, mixed types."""
    items = array.reshape(-1).tolist()
    if is_floating(dtype) and all(type(item) in (int, float) for item in items):
        if max(abs(item) for item in items) <= _FLOAT64_MAX:
            return
        raise InvalidRequest(f"Input {name!r}: values out of range for {datatype}")
    if dtype.kind in _INTEGER_KINDS and all(type(item) is int for item in items):
        info = np.iinfo(dtype)
        if info.min <= min(items) and max(items) <= info.max:
            return
        raise InvalidRequest(
            f"Input {name!r}: values out of range for {datatype} ({info.min}..{info.max})"
        )
    expected = "numbers" if is_floating(dtype) else "integers"
    if dtype.kind == "b":
        expected = "true/false"
    raise InvalidRequest(f"Input {name!r}: {datatype} data must be {expected}")


def _bytes_from_json(
    name: str, shape: tuple[int, ...], data: Any, match_nesting: bool
) -> np.ndarray:
    flat = _strings(name, shape, data, match_nesting)
    _check_size(name, shape, len(flat))
    array = np.empty(len(flat), dtype=object)
    for index, item in enumerate(flat):
        if isinstance(item, str):
            array[index] = item.encode()
        elif isinstance(item, bytes):
            array[index] = item
        else:
            raise InvalidRequest(f"Input {name!r}: BYTES data must be strings")
    return array.reshape(shape)


def _strings(name: str, shape: tuple[int, ...], data: Any, match_nesting: bool) -> list[Any]:
    """BYTES data's elements, flat; nested data is checked against ``shape``."""
    if isinstance(data, (str, bytes)):
        return [data]
    if not isinstance(data, list):
        raise InvalidRequest(f"Input {name!r}: BYTES data must be a list of strings")
    if not any(isinstance(item, list) for item in data):
        return data
    nested, leaves = _nesting(data)
    if match_nesting and nested != shape:
        raise _nesting_error(name, shape, nested)
    return leaves


def _nesting(data: list[Any]) -> tuple[tuple[int, ...] | None, list[Any]]:
    """The shape nested lists make (None when ragged) and their leaves in order.

    Level by level, not recursion: the depth is the client's to choose."""
    dims = [len(data)]
    ragged = False
    level = data
    while any(isinstance(item, list) for item in level):
        lists = [item for item in level if isinstance(item, list)]
        if len(lists) == len(level) and len({len(item) for item in lists}) == 1:
            dims.append(len(lists[0]))
            level = [leaf for item in lists for leaf in item]
        else:  # a list beside a string, or lists of unequal lengths
            ragged = True
            level = [leaf for item in level for leaf in _as_list(item)]
    return (None if ragged else tuple(dims)), level


def _as_list(item: Any) -> list[Any]:
    return item if isinstance(item, list) else [item]


def array_from_bytes(name: str, datatype: str, shape: Sequence[int], buffer: Any) -> np.ndarray:
    """Decode raw little-endian tensor bytes (binary extension, gRPC raw contents).

    The array shares memory with ``buffer`` (no copy), so it is read-only when the
    buffer is.
    """
    dtype = numpy_dtype(datatype)
    dims = check_shape(name, shape)
    if datatype == "BYTES":
        return _bytes_from_buffer(name, dims, memoryview(buffer))
    expected = element_count(dims) * dtype.itemsize
    if len(buffer) != expected:
        raise InvalidRequest(
            f"Input {name!r}: shape {list(dims)} of {datatype} needs {expected} bytes, "
            f"got {len(buffer)}"
        )
    if datatype == "BOOL" and (np.frombuffer(buffer, dtype=np.uint8) > 1).any():
        # Any other byte would make a numpy bool that is neither True nor False.
        raise InvalidRequest(f"Input {name!r}: BOOL bytes must each be 0 or 1")
    return np.frombuffer(buffer, dtype=dtype).reshape(dims)


def _bytes_from_buffer(name: str, shape: tuple[int, ...], view: memoryview) -> np.ndarray:
    count = element_count(shape)
    # Each element takes at least its 4-byte length: refuse a shape the data cannot
    # hold before allocating for it (a few bytes must not make the server allocate GBs).
    if count > len(view) // _LENGTH_PREFIX.size:
        raise InvalidRequest(
            f"Input {name!r}: shape {list(shape)} has {count} BYTES elements, more than "
            f"{len(view)} bytes of data can hold (each takes at least 4)"
        )
    array = np.empty(count, dtype=object)
    offset = 0
    end = len(view)
    for index in range(count):
        if offset + 4 > end:
            raise InvalidRequest(f"Input {name!r}: BYTES data ends before element {index}")
        (length,) = _LENGTH_PREFIX.unpack_from(view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidRequest(f"Input {name!r}: BYTES element {index} runs past the data")
        array[index] = bytes(view[offset : offset + length])
        offset += length
    if offset != end:
        raise InvalidRequest(
            f"Input {name!r}: {end - offset} bytes left over after {count} BYTES elements"
        )
    return array.reshape(shape)


def array_to_bytes(array: np.ndarray) -> bytes:
    """Raw little-endian bytes of an array; BYTES as 4-byte length + bytes each."""
    if array.dtype.kind in _TEXT_KINDS:
        return b"".join(_LENGTH_PREFIX.pack(len(item)) + item for item in bytes_items(array))
    return np.ascontiguousarray(_little_endian(array)).tobytes()


def array_to_json(array: np.ndarray) -> Any:
    """A flat value orjson can write (with OPT_SERIALIZE_NUMPY) for ``array``."""
    if array.dtype.kind in _TEXT_KINDS:
        return [_utf8(item) for item in bytes_items(array)]
    if is_floating(array.dtype) and array.dtype.itemsize == 2:
        array = array.astype(np.float32)  # FP16 and BF16: JSON writes float32 values
    # orjson writes native (little-endian) arrays only.
    return np.ascontiguousarray(_little_endian(array)).reshape(-1)


def _little_endian(array: np.ndarray) -> np.ndarray:
    """``array`` itself unless it is big-endian: the protocol's order is little-endian."""
    if array.dtype.byteorder == ">":
        return array.astype(array.dtype.newbyteorder("<"))
    return array


def _utf8(item: bytes) -> str:
    try:
        return item.decode()
    except UnicodeDecodeError:
        raise InvalidRequest(
            "An output holds bytes that are not UTF-8 text and cannot be written as JSON; "
            "request it with the binary tensor extension (binary_data) instead"
        ) from None


def bytes_items(array: np.ndarray) -> list[bytes]:
    """The elements of a BYTES tensor, flat, as bytes (str encoded as UTF-8)."""
    items = array.reshape(-1).tolist()
    for index, item in enumerate(items):
        if not isinstance(item, bytes):
            items[index] = item.encode() if isinstance(item, str) else str(item).encode()
    return items


def to_output_array(value: Any) -> np.ndarray:
    """Normalise what a runtime returns into an array the wire layers can send.

    Text arrays (numpy ``U``/``S`` dtypes, lists of str) become object arrays of
    ``bytes``; anything else must already map to a V2 datatype.
    """
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    kind = array.dtype.kind
    if kind in "US" or (kind == "O" and not _all_bytes(array)):
        converted = np.empty(array.shape, dtype=object)
        converted.reshape(-1)[:] = bytes_items(array)
        return converted
    datatype_of(array.dtype)  # raises for dtypes with no V2 datatype
    return array


def _all_bytes(array: np.ndarray) -> bool:
    return all(isinstance(item, bytes) for item in array.reshape(-1))
