"""REST bodies <-> core types: the edges of decode_infer_request and encode_infer_response."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import orjson
import pytest

from inferd.errors import InvalidRequest
from inferd.server.rest.codec import (
    MAX_PARAMETER_DEPTH,
    decode_index_request,
    decode_infer_request,
    encode_infer_response,
)
from inferd.types import InferenceResponse, RequestedOutput, Tensor


def binary_request(header: dict[str, Any], payload: bytes) -> tuple[bytes, str]:
    head = json.dumps(header).encode()
    return head + payload, str(len(head))


def sized(name: str, datatype: str, shape: list[int], size: int) -> dict[str, Any]:
    return {
        "name": name,
        "datatype": datatype,
        "shape": shape,
        "parameters": {"binary_data_size": size},
    }


def test_json_and_binary_inputs_mix_in_one_request() -> None:
    words = struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0)
    header = {
        "id": "7",
        "inputs": [
            {"name": "j", "datatype": "INT16", "shape": [2, 1], "data": [[1], [2]]},
            sized("b", "FP64", [2], 16),
            sized("w", "BYTES", [2], len(words)),
        ],
    }
    body, length = binary_request(header, np.array([0.5, 1.5]).tobytes() + words)
    request, _ = decode_infer_request(body, length)
    assert request.id == "7"
    j, b, w = request.inputs
    assert (j.data.dtype, j.data.tolist()) == (np.int16, [[1], [2]])
    assert b.data.tolist() == [0.5, 1.5]
    assert w.data.tolist() == [b"hi", b""]
    assert b.parameters == {} and w.parameters == {}, (
        "binary_data_size is the wire's, not the model's"
    )


def test_a_zero_length_header_leaves_the_whole_body_binary() -> None:
    with pytest.raises(InvalidRequest, match="The request body is empty"):
        decode_infer_request(b"\x00\x00\x00\x00", "0")


def test_an_empty_tensor_in_binary() -> None:
    body, length = binary_request({"inputs": [sized("e", "FP32", [0, 3], 0)]}, b"")
    assert decode_infer_request(body, length)[0].inputs[0].data.shape == (0, 3)


@pytest.mark.parametrize(
    ("body", "length", "fragment"),
    [
        (b'{"inputs": []}', "-1", "outside the body"),
        (b'{"inputs": []}', "1.5", "must be an integer, got '1.5'"),
        (b'{"inputs": [] }', "5", "the JSON header is the first 5 bytes"),
        (*binary_request({"inputs": [sized("t", "FP32", [1], 4)]}, b""), "runs past the end"),
        (*binary_request({"inputs": [sized("t", "FP32", [1], True)]}, b"\0" * 4), "integer >= 0"),
    ],
)
def test_binary_framing_errors(body: bytes, length: str, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode_infer_request(body, length)
    assert fragment in refused.value.message


def test_parameters_are_checked_wherever_they_are() -> None:
    deep: Any = 1
    for _ in range(MAX_PARAMETER_DEPTH + 1):
        deep = [deep]
    tensor = {"name": "t", "datatype": "FP32", "shape": [1], "data": [1]}
    cases = {
        "The request's parameters": {"inputs": [tensor], "parameters": {"p": deep}},
        "Input 't': parameters": {"inputs": [{**tensor, "parameters": {"big": 2**64}}]},
        "Output 'o': parameters": {
            "inputs": [tensor],
            "outputs": [{"name": "o", "parameters": {"p": deep}}],
        },
    }
    for where, body in cases.items():
        with pytest.raises(InvalidRequest) as refused:
            decode_infer_request(json.dumps(body).encode(), None)  # orjson refuses 2**64
        assert refused.value.message.startswith(where)


def test_index_requests() -> None:
    assert decode_index_request(b"  ") is None
    assert decode_index_request(b'{"ready": false}') is False
    with pytest.raises(InvalidRequest, match=r"\$\.ready"):
        decode_index_request(b'{"ready": 1}')


def response(*outputs: Tensor, **fields: Any) -> InferenceResponse:
    return InferenceResponse(outputs=list(outputs), model_name="m", **fields)


def test_json_answers_carry_what_the_model_said() -> None:
    answer = response(
        Tensor("f", np.array([[1.5, 2.0]], dtype=np.float32), {"content_type": "np"}),
        Tensor("s", np.array([b"a", b"b"], dtype=np.object_)),
        model_version="3",
        id="r",
        parameters={"took": 1},
    )
    body, length = encode_infer_response(answer)
    assert length is None
    assert orjson.loads(body) == {
        "model_name": "m",
        "model_version": "3",
        "id": "r",
        "parameters": {"took": 1},
        "outputs": [
            {
                "name": "f",
                "datatype": "FP32",
                "shape": [1, 2],
                "data": [1.5, 2.0],
                "parameters": {"content_type": "np"},
            },
            {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]},
        ],
    }


def test_binary_answers_per_output_and_by_default() -> None:
    answer = response(Tensor("a", np.arange(3, dtype=np.int32)), Tensor("b", np.ones(2)))
    tensor = {"name": "t", "datatype": "FP32", "shape": [1], "data": [1]}
    asked = {
        "inputs": [tensor],
        "parameters": {"binary_data_output": True, "key1": "v"},
        "outputs": [{"name": "b", "parameters": {"binary_data": False, "top": 2}}],
    }
    request, form = decode_infer_request(orjson.dumps(asked), None)
    # The model sees only the user's parameters; the edge keeps the form.
    assert request.parameters == {"key1": "v"}
    assert request.outputs == [RequestedOutput("b", {"top": 2})]
    body, length = encode_infer_response(answer, form)
    assert length is not None
    head = orjson.loads(body[:length])
    assert head["outputs"][0]["parameters"] == {"binary_data_size": 12}
    assert "data" not in head["outputs"][0]
    assert head["outputs"][1]["data"] == [1.0, 1.0]
    assert np.frombuffer(body[length:], dtype=np.int32).tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("request_body", "fragment"),
    [
        ({"parameters": {"binary_data_output": "yes"}}, "'binary_data_output' must be true"),
        ({"outputs": [{"name": "o", "parameters": {"binary_data": 1}}]}, "'binary_data'"),
        (
            {"outputs": [{"name": "o", "parameters": {"classification": True}}]},
            "'classification' must be an integer >= 1",
        ),
        ({"outputs": [{"name": "o"}, {"name": "p"}, {"name": "o"}]}, "'o' already requested (it"),
        ({"outputs": [{"name": "o"}, {"name": "o", "parameters": {}}]}, "'o' already requested"),
    ],
)
def test_output_choices_are_checked_before_the_model_runs(
    request_body: dict[str, Any], fragment: str
) -> None:
    tensor = {"name": "t", "datatype": "FP32", "shape": [1], "data": [1]}
    with pytest.raises(InvalidRequest) as refused:
        decode_infer_request(orjson.dumps({"inputs": [tensor], **request_body}), None)
    assert fragment in refused.value.message
