"""Wire conversions: BF16 (numpy has none, ml_dtypes provides it), BYTES limits, JSON nesting."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from inferd.errors import InvalidRequest
from inferd.tensors.datatypes import datatype_of, numpy_dtype
from inferd.tensors.encoding import (
    array_from_bytes,
    array_from_json,
    array_to_bytes,
    array_to_json,
    to_output_array,
)

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_bf16_is_the_ml_dtypes_bfloat16_and_back() -> None:
    assert numpy_dtype("BF16") == BF16
    assert datatype_of(BF16) == "BF16"
    # Raw two-byte records share bfloat16's kind and size but are not BF16.
    with pytest.raises(ValueError, match="no Open Inference Protocol datatype"):
        datatype_of(np.dtype("V2"))


def test_raw_bytes_are_two_little_endian_bytes_per_element() -> None:
    # 1.0 is 0x3F80 and -2.0 is 0xC000 in bfloat16.
    array = array_from_bytes("x", "BF16", [2], b"\x80\x3f\x00\xc0")
    assert array.dtype == BF16
    assert array.astype(np.float32).tolist() == [1.0, -2.0]
    assert array_to_bytes(array) == b"\x80\x3f\x00\xc0"


def test_raw_bytes_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(InvalidRequest, match=r"shape \[2\] of BF16 needs 4 bytes, got 3"):
        array_from_bytes("x", "BF16", [2], b"\x00" * 3)


def test_json_numbers_round_to_the_nearest_bf16() -> None:
    array = array_from_json("x", "BF16", [2, 2], [[0.1, 1], [-3e38, 2**-20]])
    assert array.dtype == BF16 and array.shape == (2, 2)
    expected = np.array([0.1, 1, -3e38, 2**-20]).astype(BF16)
    np.testing.assert_array_equal(array.reshape(-1), expected)


@pytest.mark.parametrize("data", [["a"], [True, "b"], [None]])
def test_json_data_that_is_not_numbers_is_refused(data: list[object]) -> None:
    with pytest.raises(InvalidRequest, match="BF16 data must be numbers"):
        array_from_json("x", "BF16", [len(data)], data)


def test_json_output_is_float32_values() -> None:
    values = array_to_json(np.array([0.5, -1.25], dtype=BF16))
    assert values.dtype == np.float32
    assert values.tolist() == [0.5, -1.25]


def test_a_model_may_return_bf16_arrays() -> None:
    array = to_output_array(np.zeros((2, 3), dtype=BF16))
    assert datatype_of(array.dtype) == "BF16"


def test_a_bytes_shape_larger_than_its_data_is_refused_before_allocating() -> None:
    with pytest.raises(InvalidRequest, match="has 2000000000 BYTES elements, more than 8 bytes"):
        array_from_bytes("x", "BYTES", [2_000_000_000], b"\0" * 8)
    assert array_from_bytes("x", "BYTES", [2], b"\0" * 8).tolist() == [b"", b""]


@pytest.mark.parametrize("datatype", ["FP32", "INT64", "BYTES"])
@pytest.mark.parametrize(
    ("shape", "data", "holds"),
    [
        ([1, 4], [[1, 2], [3, 4]], "nests as [2, 2]"),
        ([4], [[1, 2, 3, 4]], "nests as [1, 4]"),
        ([2, 2], [[[1, 2], [3, 4]]], "nests as [1, 2, 2]"),
        ([2, 1], [[1, 2]], "nests as [1, 2]"),
    ],
)
def test_nested_data_must_nest_as_its_shape(
    datatype: str, shape: list[int], data: list[object], holds: str
) -> None:
    if datatype == "BYTES":
        data = _as_text(data)
    expected = rf"Input 'x': shape \[{', '.join(map(str, shape))}\] does not match its nested"
    with pytest.raises(InvalidRequest, match=expected) as raised:
        array_from_json("x", datatype, shape, data)
    assert f"which {holds}; nest the data exactly as the shape, or send it flat" in str(
        raised.value
    )


@pytest.mark.parametrize("datatype", ["FP32", "INT64", "BYTES"])
@pytest.mark.parametrize(
    ("shape", "data"),
    [
        ([1, 4], [[1, 2, 3, 4]]),
        ([2, 2], [[1, 2], [3, 4]]),
        ([1, 4], [1, 2, 3, 4]),  # flat data: only the element count must match
        ([2, 2], [1, 2, 3, 4]),
        ([1, 0], [[]]),
    ],
)
def test_data_nested_as_its_shape_or_flat_is_accepted(
    datatype: str, shape: list[int], data: list[object]
) -> None:
    if datatype == "BYTES":
        data = _as_text(data)
    array = array_from_json("x", datatype, shape, data)
    assert array.shape == tuple(shape)
    sent = np.array(data, dtype=object).reshape(-1).tolist()
    expected = [item.encode() for item in sent] if datatype == "BYTES" else sent
    assert array.reshape(-1).tolist() == expected


def test_nested_bytes_keep_their_order() -> None:
    array = array_from_json("x", "BYTES", [2, 2], [["a", "b"], ["c", "d"]])
    assert array.tolist() == [[b"a", b"b"], [b"c", b"d"]]


def test_ragged_bytes_are_refused_as_ragged() -> None:
    with pytest.raises(InvalidRequest, match="which is ragged"):
        array_from_json("x", "BYTES", [2, 2], [["a", "b"], ["c"], "d"])
    with pytest.raises(InvalidRequest, match="which is ragged"):
        array_from_json("x", "BYTES", [2, 2], [["a", "b", "c"], ["d"]])


def test_a_caller_may_lay_nested_data_out_in_a_shape_of_its_own() -> None:
    numbers = array_from_json("x", "INT64", [4], [[1, 2], [3, 4]], match_nesting=False)
    assert numbers.tolist() == [1, 2, 3, 4]
    text = array_from_json("x", "BYTES", [1, 3], [["a"], ["b", "c"]], match_nesting=False)
    assert text.tolist() == [[b"a", b"b", b"c"]]


def _as_text(data: list[object]) -> list[object]:
    return [_as_text(item) if isinstance(item, list) else str(item) for item in data]
