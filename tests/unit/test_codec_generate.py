"""The flat generate bodies (Triton's generate extension) <-> core types."""

from __future__ import annotations

import json
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from inferd.errors import InvalidRequest
from inferd.server.rest.codec_generate import (
    decode_generate_request,
    encode_generate_response,
    fit_shape,
    flat_value,
    is_v2_body,
)
from inferd.types import InferenceRequest, InferenceResponse, MetadataTensor, Tensor

DECLARED = [
    MetadataTensor("text_input", "BYTES", [1], {"content_type": "str"}),
    MetadataTensor("max_tokens", "INT32", [1]),
    MetadataTensor("stop", "BYTES", [-1]),
    MetadataTensor("features", "FP32", [-1, 3]),
    MetadataTensor("greedy", "BOOL", [1]),
]


def decode(body: Any, declared: list[MetadataTensor] | None = None) -> InferenceRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return decode_generate_request(raw, DECLARED if declared is None else declared)


def inputs_of(request: InferenceRequest) -> dict[str, tuple[str, tuple[int, ...], list[Any]]]:
    return {t.name: (t.datatype, t.shape, np.ravel(t.data).tolist()) for t in request.inputs}


# ---- requests, with declared inputs ----


def test_declared_inputs_take_their_datatype_and_shape() -> None:
    request = decode(
        {
            "text_input": "hi",
            "max_tokens": 8,
            "stop": ["a", "b"],
            "features": [1, 2, 3],
            "greedy": True,
        }
    )
    assert inputs_of(request) == {
        "text_input": ("BYTES", (1,), [b"hi"]),
        "max_tokens": ("INT32", (1,), [8]),
        "stop": ("BYTES", (2,), [b"a", b"b"]),
        "features": ("FP32", (1, 3), [1.0, 2.0, 3.0]),
        "greedy": ("BOOL", (1,), [True]),
    }
    assert request.input("text_input").parameters == {"content_type": "str"}
    assert request.input("features").data.dtype == np.float32
    assert request.parameters == {}


def test_other_keys_and_the_parameters_object_become_parameters() -> None:
    request = decode(
        {
            "text_input": "hi",
            "temperature": 0.5,
            "top_k": 3,
            "parameters": {"stream": False, "top_k": 5},
            "id": "r-1",
        }
    )
    assert [t.name for t in request.inputs] == ["text_input"]
    # The parameters object wins over a key of the same name.
    assert request.parameters == {"temperature": 0.5, "top_k": 5, "stream": False}
    assert request.id == "r-1"


def test_an_input_named_id_is_an_input() -> None:
    request = decode({"id": "x"}, [MetadataTensor("id", "BYTES", [1])])
    assert request.id is None
    assert inputs_of(request) == {"id": ("BYTES", (1,), [b"x"])}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": "many"}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_tokens": [1, 2]}, "2 value(s) do not fit its declared shape [1]"),
        ({"features": [1, 2]}, "2 value(s) do not fit its declared shape [-1, 3]"),
        ({"text_input": None}, "must be a string, number, bool or list, got null"),
        ({"text_input": {"a": 1}}, "got an object"),
        ({"parameters": [1]}, '"parameters" must be an object, got a list'),
        ({"parameters": None}, '"parameters" must be an object, got null'),
        ({"temperature": 2**70}, "integer beyond 64 bits"),
        (b"", "The request body is empty"),
        (b"[1, 2]", "send one JSON object"),
        (b"{", "Invalid generate request"),
        (b"\xff", "Invalid generate request"),
    ],
)
def test_bad_requests_say_what_is_wrong(body: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode(body)
    assert message in refused.value.message


@pytest.mark.parametrize(
    ("given", "declared", "shape"),
    [
        ((1,), [1], [1]),
        ((1,), [-1], [1]),
        ((1,), [1, 1], [1, 1]),
        ((1,), [], []),
        ((3,), [-1, 3], [1, 3]),
        ((2, 3), [-1, 3], [2, 3]),
        ((6,), [-1, 3], [2, 3]),
        ((4,), [-1, -1], [1, 4]),
        ((2, 2), [-1, -1], [2, 2]),
        ((0,), [-1], [0]),
    ],
)
def test_values_are_laid_out_in_the_declared_shape(
    given: tuple[int, ...], declared: list[int], shape: list[int]
) -> None:
    assert fit_shape("x", given, declared) == shape


# ---- requests, with no declared inputs ----


def test_without_declared_inputs_values_are_typed_from_json() -> None:
    request = decode(
        {
            "text_input": "hi",
            "n": 3,
            "p": 0.5,
            "flag": False,
            "words": ["a", "b"],
            "grid": [[1, 2], [3, 4]],
            "mixed": [1, 2.5],
            "options": {"k": 1},  # cannot be a tensor: a parameter
            "id": "r-2",
        },
        declared=[],
    )
    assert inputs_of(request) == {
        "text_input": ("BYTES", (1,), [b"hi"]),
        "n": ("INT64", (1,), [3]),
        "p": ("FP64", (1,), [0.5]),
        "flag": ("BOOL", (1,), [False]),
        "words": ("BYTES", (2,), [b"a", b"b"]),
        "grid": ("INT64", (2, 2), [1, 2, 3, 4]),
        "mixed": ("FP64", (2,), [1.0, 2.5]),
    }
    assert request.parameters == {"options": {"k": 1}}
    assert request.id == "r-2"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["a", 1], "holds numbers, strings"),
        ([True, 1], "holds bools, numbers"),
        ([[1, 2], [3]], "'x'"),
        ([None], "holds nulls"),
    ],
)
def test_lists_that_are_not_one_tensor_are_refused(value: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode({"x": value}, declared=[])
    assert message in refused.value.message


# ---- answers ----


def test_answers_are_flat() -> None:
    response = InferenceResponse(
        outputs=[
            Tensor("text_output", np.array([b"hello"], dtype=object)),
            Tensor("count", np.array([[7]], dtype=np.int32)),
            Tensor("score", np.array([0.5], dtype=np.float16)),
            Tensor("done", np.array([True])),
            Tensor("tokens", np.array([[b"a", b"b"], [b"c", b"d"]], dtype=object)),
            Tensor("logits", np.arange(6, dtype=np.float32).reshape(2, 3)),
            Tensor("none", np.zeros((0,), dtype=np.int64)),
        ],
        model_name="llm",
        model_version="2",
        id="r-3",
    )
    assert json.loads(encode_generate_response(response)) == {
        "model_name": "llm",
        "model_version": "2",
        "id": "r-3",
        "text_output": "hello",
        "count": 7,
        "score": 0.5,
        "done": True,
        "tokens": [["a", "b"], ["c", "d"]],
        "logits": [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]],
        "none": [],
    }


def test_an_answer_leaves_out_what_it_does_not_have() -> None:
    response = InferenceResponse([Tensor("y", np.array([1]))], model_name="m")
    assert json.loads(encode_generate_response(response)) == {"model_name": "m", "y": 1}


def test_bfloat16_and_a_scalar_become_numbers() -> None:
    assert flat_value(np.array([1.5], dtype=ml_dtypes.bfloat16)) == 1.5
    assert flat_value(np.array(3, dtype=np.uint8)) == 3


def test_an_output_named_like_the_identity_is_refused() -> None:
    response = InferenceResponse([Tensor("id", np.array([1]))], model_name="m")
    with pytest.raises(InvalidRequest) as refused:
        encode_generate_response(response)
    assert "use /infer" in refused.value.message


def test_an_output_that_is_not_text_is_refused() -> None:
    response = InferenceResponse([Tensor("y", np.array([b"\xff"], dtype=object))], model_name="m")
    with pytest.raises(InvalidRequest) as refused:
        encode_generate_response(response)
    assert "not UTF-8" in refused.value.message


# ---- V2 bodies on the generate routes (MLServer's aliases of infer) ----


@pytest.mark.parametrize(
    ("body", "binary", "v2"),
    [
        (
            b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]}',
            False,
            True,
        ),
        (b'{"id": "a", "inputs" : [ \n {"name": "x"}], "outputs": []}', False, True),
        (b'{"inputs": [1, 2]}', False, False),  # a flat input named "inputs"
        (b'{"inputs": []}', False, False),
        (b'{"inputs": "text"}', False, False),
        (b'{"text_input": [{"a": 1}]}', False, False),
        (b'{"text_input": "hi"}', False, False),
        (b'[{"inputs": [{}]}]', False, False),
        (b"not json", False, False),
        (b"", False, False),
        (b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", False, False),
        (b"\xff\xfe", False, False),
        (b'{"inputs": [{"name": "x", "parameters": {"binary_data_size": 4}}]}\x00\x00', True, True),
    ],
)
def test_a_v2_body_is_one_whose_inputs_are_objects(body: bytes, binary: bool, v2: bool) -> None:
    assert is_v2_body(body, binary) is v2


@pytest.mark.parametrize(
    ("body", "declared", "message"),
    [
        (b'{"text_input": "a", "text_input": "b"}', None, "input 'text_input' already exists"),
        (b'{"text_input": "a", "text_\\u0069nput": "b"}', None, "input 'text_input' already"),
        (b'{"x": 1, "y": 2, "x": 3}', [], "input 'x' already exists in request"),
        (
            b'{"text_input": "a", "top_k": 1, "top_k": 2}',
            None,
            "key 'top_k' appears more than once",
        ),
        (
            b'{"text_input": "a", "parameters": {}, "parameters": {}}',
            None,
            "key 'parameters' appears",
        ),
    ],
)
def test_a_key_given_twice_is_refused(
    body: bytes, declared: list[MetadataTensor] | None, message: str
) -> None:
    """Triton refuses an input given twice; a JSON decoder would keep the last quietly."""
    with pytest.raises(InvalidRequest) as refused:
        decode(body, declared)
    assert message in refused.value.message


def test_the_same_key_in_nested_objects_or_strings_is_no_repeat() -> None:
    body = b'{"text_input": "\\"text_input\\"", "parameters": {"text_input": 1, "a": {"a": 1}}}'
    assert inputs_of(decode(body))["text_input"][2] == [b'"text_input"']
