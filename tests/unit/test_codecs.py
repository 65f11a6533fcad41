"""Content types (np, str, base64, datetime, pd_json, pd) in both directions."""

from __future__ import annotations

import base64
import datetime as dt
import sys

import numpy as np
import pandas as pd
import pytest

from inferd.errors import InvalidRequest
from inferd.tensors import codecs
from inferd.types import InferenceRequest, Tensor


def bytes_tensor(name: str, items: list[bytes], content_type: str | None = None) -> Tensor:
    data = np.empty(len(items), dtype=object)
    data[:] = items
    parameters = {"content_type": content_type} if content_type else {}
    return Tensor(name, data, parameters)


def request(*inputs: Tensor, content_type: str | None = None) -> InferenceRequest:
    parameters = {"content_type": content_type} if content_type else {}
    return InferenceRequest(inputs=list(inputs), parameters=parameters)


# --- decode_tensor --------------------------------------------------------------


def test_numeric_tensor_decodes_to_the_same_array() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert codecs.decode_tensor(Tensor("x", data)) is data
    assert codecs.decode_tensor(Tensor("x", data, {"content_type": "np"})) is data


def test_bytes_tensor_decodes_to_its_object_array_by_default() -> None:
    tensor = bytes_tensor("x", [b"a", b"b"])
    assert codecs.decode_tensor(tensor) is tensor.data


def test_pd_on_a_tensor_means_np() -> None:
    # A model whose default content type is pd decodes single tensors as numpy.
    data = np.arange(3)
    assert codecs.decode_tensor(Tensor("x", data), default="pd") is data


def test_str_decodes_utf8_flattened() -> None:
    data = np.array([[b"caf\xc3\xa9", b"b"], [b"c", b""]], dtype=object)
    tensor = Tensor("text", data, {"content_type": "str"})
    assert codecs.decode_tensor(tensor) == ["café", "b", "c", ""]


def test_default_applies_only_without_a_tensor_content_type() -> None:
    untagged = bytes_tensor("x", [b"aGk="])
    tagged = bytes_tensor("x", [b"aGk="], "base64")
    assert codecs.decode_tensor(untagged, default="str") == ["aGk="]
    assert codecs.decode_tensor(tagged, default="str") == [b"hi"]


def test_base64_decodes_each_element() -> None:
    tensor = bytes_tensor("img", [base64.b64encode(b"\x00\xff"), b""], "base64")
    assert codecs.decode_tensor(tensor) == [b"\x00\xff", b""]


def test_datetime_decodes_iso_8601() -> None:
    tensor = bytes_tensor(
        "when", [b"2024-05-01T12:30:00", b"2024-05-01T12:30:00+02:00", b"2024-05-01"], "datetime"
    )
    assert codecs.decode_tensor(tensor) == [
        dt.datetime(2024, 5, 1, 12, 30),
        dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        dt.datetime(2024, 5, 1),
    ]


def test_pd_json_decodes_each_element() -> None:
    tensor = bytes_tensor("j", [b'{"a": 1}', b"null", b"[1, 2]"], "pd_json")
    assert codecs.decode_tensor(tensor) == [{"a": 1}, None, [1, 2]]


@pytest.mark.parametrize(
    ("content_type", "good", "bad", "expected"),
    [
        ("str", b"ok", b"\xff\xfe", "element 1 is not UTF-8 text"),
        ("base64", b"aGk=", b"not base64!", "element 1 is not base64"),
        ("datetime", b"2024-01-01", b"yesterday", "element 1 is not an ISO 8601 date/time"),
        ("pd_json", b"1", b"{oops", "element 1 is not a JSON document"),
        ("pd_json", b"[]", b"[" * 100_000, "element 1 is not a JSON document"),  # too deep
    ],
)
def test_undecodable_element_names_input_and_element(
    content_type: str, good: bytes, bad: bytes, expected: str
) -> None:
    tensor = bytes_tensor("payload", [good, bad], content_type)
    with pytest.raises(InvalidRequest, match=f"Input 'payload': {expected}"):
        codecs.decode_tensor(tensor)


def test_text_content_type_on_numeric_tensor_is_refused() -> None:
    tensor = Tensor("x", np.zeros(2, dtype=np.float32), {"content_type": "str"})
    with pytest.raises(InvalidRequest, match="'str' needs a BYTES tensor, got FP32"):
        codecs.decode_tensor(tensor)


def test_unknown_content_type_is_refused() -> None:
    tensor = Tensor("x", np.zeros(2), {"content_type": "jpeg"})
    with pytest.raises(InvalidRequest, match="Input 'x': unknown content type 'jpeg'"):
        codecs.decode_tensor(tensor)


# --- encode_tensor --------------------------------------------------------------


def test_numeric_array_is_sent_without_copy_or_tag() -> None:
    data = np.arange(6, dtype=np.int32).reshape(3, 2)
    tensor = codecs.encode_tensor("y", data)
    assert tensor.data is data
    assert tensor.datatype == "INT32"
    assert tensor.parameters == {}


def test_1d_result_gets_mlserver_batch_dimension() -> None:
    data = np.array([0.5, 1.5])
    tensor = codecs.encode_tensor("y", data)
    assert tensor.shape == (2, 1)
    assert np.shares_memory(tensor.data, data)
    assert codecs.encode_tensor("y", np.float64(3.0)).shape == (1,)


def test_lists_and_scalars_of_numbers() -> None:
    assert codecs.encode_tensor("y", [1, 2, 3]).datatype == "INT64"
    assert codecs.encode_tensor("y", [[1.0, 2.0]]).shape == (1, 2)
    assert codecs.encode_tensor("y", [True, False]).datatype == "BOOL"
    assert codecs.encode_tensor("y", 7).data.tolist() == [7]


def test_list_of_str_round_trips() -> None:
    tensor = codecs.encode_tensor("text", ["héllo", "world"])
    assert tensor.datatype == "BYTES"
    assert tensor.shape == (2, 1)
    assert tensor.parameters == {"content_type": "str"}
    assert tensor.data[0, 0] == "héllo".encode()
    assert codecs.decode_tensor(tensor) == ["héllo", "world"]


def test_str_numpy_array_is_tagged_str_and_keeps_its_shape() -> None:
    tensor = codecs.encode_tensor("labels", np.array([["a", "b"], ["c", "d"]]))
    assert tensor.shape == (2, 2)
    assert tensor.content_type == "str"
    assert codecs.decode_tensor(tensor) == ["a", "b", "c", "d"]


def test_explicit_np_leaves_text_untagged() -> None:
    tensor = codecs.encode_tensor("labels", ["a"], "np")
    assert tensor.parameters == {}
    assert tensor.data.tolist() == [[b"a"]]


def test_list_of_bytes_is_raw_bytes_keeping_trailing_nul() -> None:
    tensor = codecs.encode_tensor("blob", [b"a\x00", b"\x00"])
    assert tensor.parameters == {}
    assert tensor.data.reshape(-1).tolist() == [b"a\x00", b"\x00"]


def test_base64_round_trips() -> None:
    tensor = codecs.encode_tensor("blob", [b"\x00\xff", b"x"], "base64")
    assert tensor.content_type == "base64"
    assert tensor.data.reshape(-1).tolist() == [b"AP8=", b"eA=="]
    assert codecs.decode_tensor(tensor) == [b"\x00\xff", b"x"]


def test_datetimes_round_trip() -> None:
    values = [dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC), dt.datetime(1999, 12, 31)]
    tensor = codecs.encode_tensor("when", values)
    assert tensor.content_type == "datetime"
    assert tensor.shape == (2, 1)
    assert tensor.data[0, 0] == b"2024-01-02T03:04:05+00:00"
    assert codecs.decode_tensor(tensor) == values


def test_numpy_datetimes_are_sent_as_iso_text() -> None:
    tensor = codecs.encode_tensor("when", np.array(["2024-01-02T03:04"], dtype="datetime64[m]"))
    assert tensor.content_type == "datetime"
    assert codecs.decode_tensor(tensor) == [dt.datetime(2024, 1, 2, 3, 4)]


def test_encode_unknown_content_type_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="Output 'y': unknown content type 'jpeg'"):
        codecs.encode_tensor("y", [1], "jpeg")


# --- decode_request / encode_outputs --------------------------------------------


def test_request_with_one_input_decodes_that_input() -> None:
    data = np.ones((2, 3))
    assert codecs.decode_request(request(Tensor("x", data))) is data


def test_request_content_type_is_every_inputs_default() -> None:
    decoded = codecs.decode_request(
        request(
            bytes_tensor("a", [b"x"]), bytes_tensor("b", [b"eQ=="], "base64"), content_type="str"
        )
    )
    assert decoded == {"a": ["x"], "b": [b"y"]}


def test_several_inputs_decode_to_a_dict() -> None:
    a, b = np.zeros(2), np.ones(2)
    assert codecs.decode_request(request(Tensor("a", a), Tensor("b", b))) == {"a": a, "b": b}


def test_encode_outputs_of_a_bare_value_and_a_dict() -> None:
    (single,) = codecs.encode_outputs(np.zeros((2, 2)))
    assert single.name == "output-1"
    named = codecs.encode_outputs({"scores": np.zeros(2), "labels": ["a", "b"]})
    assert [(t.name, t.datatype, t.content_type) for t in named] == [
        ("scores", "FP64", None),
        ("labels", "BYTES", "str"),
    ]


# --- pandas ----------------------------------------------------------------------


def test_pd_request_decodes_one_column_per_input() -> None:
    frame = codecs.decode_request(
        request(
            Tensor("age", np.array([31, 42], dtype=np.int32)),
            Tensor("height", np.array([[1.7], [1.8]])),
            bytes_tensor("name", [b"ann", b"bob"], "str"),
            bytes_tensor("joined", [b"2024-01-01", b"2024-02-01"], "datetime"),
            content_type="pd",
        )
    )
    assert list(frame.columns) == ["age", "height", "name", "joined"]
    assert frame["age"].dtype == np.int32
    assert frame["height"].tolist() == [1.7, 1.8]
    assert frame["name"].tolist() == ["ann", "bob"]
    assert pd.api.types.is_string_dtype(frame["name"].dtype)
    assert pd.api.types.is_datetime64_any_dtype(frame["joined"].dtype)


def test_pd_default_content_type_gives_a_dataframe() -> None:
    frame = codecs.decode_request(request(Tensor("x", np.arange(3))), default="pd")
    assert isinstance(frame, pd.DataFrame)


def test_untagged_bytes_column_is_text_when_utf8() -> None:
    # MLServer hands REST clients' untagged BYTES columns over as str.
    frame = codecs.decode_request(
        request(
            bytes_tensor("t", [b"a", b"b"]), bytes_tensor("raw", [b"\xff", b"x"]), content_type="pd"
        )
    )
    assert frame["t"].tolist() == ["a", "b"]
    assert frame["raw"].tolist() == [b"\xff", b"x"]


def test_pd_inputs_with_different_row_counts_are_refused() -> None:
    bad = request(Tensor("a", np.zeros(2)), Tensor("b", np.zeros(3)), content_type="pd")
    with pytest.raises(InvalidRequest, match="same number of rows; got 'a': 2, 'b': 3"):
        codecs.decode_request(bad)


def test_pd_input_wider_than_one_column_is_refused() -> None:
    bad = request(Tensor("x", np.zeros((4, 2))), content_type="pd")
    with pytest.raises(InvalidRequest, match=r"Input 'x': shape \[4, 2\] cannot be one DataFrame"):
        codecs.decode_request(bad)


def test_dataframe_encodes_one_output_per_column() -> None:
    frame = pd.DataFrame(
        {
            "score": np.array([0.5, 1.5], dtype=np.float32),
            "label": ["a", "b"],
            "flag": [True, False],
            "when": pd.to_datetime(["2024-01-01T10:00", "2024-01-02T11:00"]),
            "count": pd.array([1, None], dtype="Int64"),
            "extra": [{"k": 1}, None],
        }
    )
    outputs = {tensor.name: tensor for tensor in codecs.encode_outputs(frame)}
    assert {name: (t.datatype, t.shape, t.content_type) for name, t in outputs.items()} == {
        "score": ("FP32", (2, 1), None),
        "label": ("BYTES", (2, 1), "str"),
        "flag": ("BOOL", (2, 1), None),
        "when": ("BYTES", (2, 1), "datetime"),
        "count": ("FP64", (2, 1), None),
        "extra": ("BYTES", (2, 1), "pd_json"),
    }
    assert outputs["label"].data.reshape(-1).tolist() == [b"a", b"b"]
    assert outputs["extra"].data.reshape(-1).tolist() == [b'{"k":1}', b"null"]
    assert np.isnan(outputs["count"].data[1, 0])


def test_dataframe_round_trips_through_a_pd_request() -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "n": [1, 2, 3], "city": ["Oslo", "Rome", "Lima"]})
    decoded = codecs.decode_request(request(*codecs.encode_outputs(frame), content_type="pd"))
    pd.testing.assert_frame_equal(decoded, frame)


def test_missing_pandas_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # makes `import pandas` fail
    with pytest.raises(InvalidRequest, match=r"pip install inferd\[pandas\]"):
        codecs.decode_request(request(Tensor("x", np.zeros(2)), content_type="pd"))
    # Encoding never needs pandas unless the value is a DataFrame.
    assert codecs.encode_outputs([1, 2])[0].name == "output-1"
