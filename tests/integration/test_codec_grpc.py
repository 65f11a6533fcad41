"""Protobuf messages <-> core types: typed and raw contents, parameters, their edges."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from inferd.errors import InvalidRequest
from inferd.protocol import pb
from inferd.protocol.parameters import decode_parameters, encode_parameters
from inferd.server.grpc.codec import decode_infer_request, encode_infer_response, wants_raw_output
from inferd.types import InferenceRequest, InferenceResponse, Tensor


def typed(datatype: str, shape: list[int], field: str, values: list[Any]) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="t", datatype=datatype, shape=shape)
    getattr(tensor.contents, field).extend(values)
    return message


@pytest.mark.parametrize(
    ("datatype", "field", "values", "dtype"),
    [
        ("INT8", "int_contents", [-128, 127], np.int8),
        ("UINT16", "uint_contents", [0, 65535], np.uint16),
        ("INT64", "int64_contents", [-(2**63), 2**63 - 1], np.int64),
        ("BOOL", "bool_contents", [True, False], np.bool_),
        ("FP64", "fp64_contents", [0.5, -1.0], np.float64),
        ("FP32", "fp32_contents", [float(v) for v in range(40)], np.float32),  # the long path
    ],
)
def test_typed_contents_become_arrays_of_the_datatype(
    datatype: str, field: str, values: list[Any], dtype: type
) -> None:
    (tensor,) = decode_infer_request(typed(datatype, [len(values)], field, values))[0].inputs
    assert tensor.data.dtype == dtype
    assert tensor.data.tolist() == values


def test_bytes_contents_keep_their_shape() -> None:
    (tensor,) = decode_infer_request(typed("BYTES", [2, 1], "bytes_contents", [b"a", b""]))[
        0
    ].inputs
    assert tensor.data.shape == (2, 1) and tensor.data.ravel().tolist() == [b"a", b""]


def test_raw_contents_are_read_without_a_copy_per_element() -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    message = pb.ModelInferRequest(model_name="m", raw_input_contents=[values.tobytes()])
    message.inputs.add(name="t", datatype="FP32", shape=[2, 3])
    (tensor,) = decode_infer_request(message)[0].inputs
    np.testing.assert_array_equal(tensor.data, values)


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        (typed("INT8", [1], "int_contents", [128]), "out of range for INT8 (-128..127)"),
        (
            typed("FP32", [2], "fp32_contents", [1.0]),
            "needs 2 elements, contents.fp32_contents has 1",
        ),
        (typed("FP32", [1], "fp64_contents", [1.0]), "belongs in contents.fp32_contents"),
        (typed("FP32", [1], "fp32_contents", []), "has no data"),
        (typed("FP16", [1], "fp32_contents", [1.0]), "FP16 has no typed contents field"),
        (typed("FP8", [1], "fp32_contents", [1.0]), "FP8"),
    ],
)
def test_typed_contents_errors(message: pb.ModelInferRequest, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode_infer_request(message)
    assert fragment in refused.value.message


def test_raw_and_typed_contents_do_not_mix() -> None:
    message = typed("FP32", [1], "fp32_contents", [1.0])
    message.raw_input_contents.append(np.float32(1).tobytes())
    with pytest.raises(InvalidRequest, match="both typed contents and raw_input_contents"):
        decode_infer_request(message)


def test_request_fields_and_parameters() -> None:
    message = typed("FP32", [1], "fp32_contents", [1.0])
    message.id = "r"
    message.parameters["raw_output"].bool_param = False
    message.parameters["unset"].CopyFrom(pb.InferParameter())
    output = message.outputs.add(name="o")
    output.parameters["k"].int64_param = 3
    request, _ = decode_infer_request(message)
    assert (request.id, request.parameters) == ("r", {"raw_output": False})
    assert [(o.name, o.parameters) for o in request.outputs] == [("o", {"k": 3})]
    assert wants_raw_output(request) is False


def test_an_output_requested_twice_is_refused() -> None:
    message = typed("FP32", [1], "fp32_contents", [1.0])
    for name in ("o", "p", "o"):
        message.outputs.add(name=name)
    twice = r"^output 'o' already requested \(it appears more than once\)$"
    with pytest.raises(InvalidRequest, match=twice):
        decode_infer_request(message)


def test_raw_output_must_be_a_bool() -> None:
    with pytest.raises(InvalidRequest, match="must be a bool"):
        wants_raw_output(InferenceRequest(inputs=[], parameters={"raw_output": "no"}))


def test_parameters_round_trip_and_what_the_protocol_cannot_hold() -> None:
    encoded = encode_parameters(
        {
            "b": True,
            "i": np.int64(-3),
            "u": 2**64 - 1,
            "huge": 2**70,
            "f": 0.5,
            "s": "x",
            "l": [1, 2],
            "none": None,
        }
    )
    assert decode_parameters(encoded) == {
        "b": True,
        "i": -3,
        "u": 2**64 - 1,
        "huge": str(2**70),
        "f": 0.5,
        "s": "x",
        "l": "[1, 2]",
    }


def answer_of(*outputs: Tensor) -> InferenceResponse:
    return InferenceResponse(outputs=list(outputs), model_name="m", model_version="1", id="r")


def test_raw_answers_carry_bytes_in_order() -> None:
    half = np.array([1.5], dtype=np.float16)
    brain = np.array([2.0], dtype=ml_dtypes.bfloat16)
    message = encode_infer_response(answer_of(Tensor("h", half), Tensor("b", brain)), raw=True)
    assert (message.model_name, message.model_version, message.id) == ("m", "1", "r")
    assert [(o.name, o.datatype) for o in message.outputs] == [("h", "FP16"), ("b", "BF16")]
    assert message.raw_output_contents[0] == half.tobytes()
    assert message.raw_output_contents[1] == brain.tobytes()


def test_typed_answers_fill_the_datatype_field() -> None:
    words = np.array(["é", b"b"], dtype=np.object_)
    answer = answer_of(Tensor("w", words), Tensor("n", np.array([[1, 2]], dtype=np.uint8)))
    message = encode_infer_response(answer, raw=False)
    assert not message.raw_output_contents
    assert list(message.outputs[0].contents.bytes_contents) == ["é".encode(), b"b"]
    assert list(message.outputs[1].contents.uint_contents) == [1, 2]
    assert list(message.outputs[1].shape) == [1, 2]


def test_typed_answers_refuse_datatypes_without_a_field() -> None:
    half = Tensor("h", np.array([1.0], dtype=np.float16))
    with pytest.raises(InvalidRequest, match="leave the 'raw_output' parameter unset"):
        encode_infer_response(answer_of(half), raw=False)
