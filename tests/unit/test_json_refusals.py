"""The words for a body that is not the JSON asked for are inferd's, whatever the
msgspec or orjson release: each message is pinned whole, so a message that a
dependency wrote (msgspec 0.23's "Invalid UTF-8 encoded string", orjson's
"unexpected character") fails here."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from inferd.errors import InvalidParameter, InvalidRequest
from inferd.json_refusals import ShapeFault, not_json_reason, shape_fault
from inferd.server.codec_triton import decode_load_request, decode_log_settings
from inferd.server.openai import wire
from inferd.server.rest import codec
from inferd.server.rest.codec import decode_infer_request

NOT_UTF8 = b'{"inputs": [{"name": "\xff", "datatype": "FP32", "shape": [1], "data": [1]}]}'
UTF8_REASON = "JSON must be UTF-8 text; byte 22 (0xff) is not"


class _Refusing:
    """A decoder that refuses every body with ``error``, as some library release does."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def decode(self, body: bytes) -> Any:
        raise self.error


def test_bytes_that_are_not_utf8_are_refused_in_inferds_words() -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode_infer_request(NOT_UTF8, None)
    assert refused.value.message == f"Invalid inference request: {UTF8_REASON}"


@pytest.mark.parametrize(
    "library_error",
    [
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),  # msgspec < 0.23
        msgspec.DecodeError("Invalid UTF-8 encoded string"),  # msgspec 0.23
        msgspec.DecodeError("some future wording"),
    ],
    ids=["UnicodeDecodeError", "DecodeError", "other wording"],
)
def test_the_utf8_refusal_does_not_depend_on_how_the_library_fails(
    library_error: Exception,
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        codec._decode(_Refusing(library_error), NOT_UTF8, "inference request")  # type: ignore[arg-type]
    assert refused.value.message == f"Invalid inference request: {UTF8_REASON}"


@pytest.mark.parametrize(
    "body, reason",
    [
        (b'{"inputs": [', "the body is not valid JSON: Expecting value at line 1 column 13"),
        (b'{"inputs": []} x', "the body is not valid JSON: Extra data at line 1 column 16"),
        (b'{"a": NaN}', "the body is not valid JSON: NaN is not a JSON number"),
        (b'{"a": -Infinity}', "the body is not valid JSON: -Infinity is not a JSON number"),
        (b"\xef\xbb", "JSON must be UTF-8 text; byte 0 (0xef) is not"),
    ],
)
def test_syntax_is_described_by_pythons_own_json(body: bytes, reason: str) -> None:
    assert not_json_reason(body, msgspec.DecodeError("whatever msgspec says")) == reason


def test_json_that_only_the_library_refuses_keeps_its_detail_after_inferds_words() -> None:
    error = msgspec.DecodeError("Number out of range")
    assert not_json_reason(b'{"a": 1}', error) == (
        "the body is JSON this server cannot read (Number out of range)"
    )


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"[1, 2]", "the body must be object, got array"),
        (b'{"inputs": 3}', "$.inputs must be array, got integer"),
        (b'{"inputs": [{"name": 1}]}', "$.inputs[0].name must be string, got integer"),
        (b'{"inputs": [{"name": "a"}]}', "the required field $.inputs[0].shape is missing"),
        (b'{"inputs": [], "id": 1e999}', "Number out of range at $.id"),
    ],
)
def test_a_body_of_the_wrong_shape_is_worded_by_inferd(body: bytes, reason: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode_infer_request(body, None)
    assert refused.value.message == f"Invalid inference request: {reason}"


def test_shape_faults_read_unions_as_json_types() -> None:
    fault = shape_fault(msgspec.ValidationError("Expected `str | null`, got `int` - at `$.id`"))
    assert fault == ShapeFault("$.id", expected="string or null", got="integer")


def test_openai_bodies_are_refused_in_openais_words() -> None:
    with pytest.raises(InvalidParameter) as refused:
        wire.decode(b'{"model": "m", "prompt": "\xff"}', wire.CompletionBody)
    assert refused.value.message == (
        "We could not parse the JSON body of your request: "
        "JSON must be UTF-8 text; byte 26 (0xff) is not"
    )
    with pytest.raises(InvalidParameter) as typed:
        wire.decode(b'{"model": "m", "prompt": "x", "temperature": "hot"}', wire.CompletionBody)
    assert typed.value.message == (
        "Invalid type for 'temperature': expected number or null, but got string instead."
    )
    assert (typed.value.param, typed.value.reason) == ("temperature", "invalid_type")


def test_triton_json_bodies_are_refused_in_inferds_words_not_orjsons() -> None:
    with pytest.raises(InvalidRequest) as load:
        decode_load_request("m", b"{nope")
    assert load.value.message == (
        "failed to load 'm': the body is not valid JSON: "
        "Expecting property name enclosed in double quotes at line 1 column 2"
    )
    with pytest.raises(InvalidRequest) as logs:
        decode_log_settings(b"\xff")
    assert logs.value.message == "JSON must be UTF-8 text; byte 0 (0xff) is not"
