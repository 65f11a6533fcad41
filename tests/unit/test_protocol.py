"""The generated gRPC protocol code: current, and wire-compatible with tritonclient."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pool, json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from inferd.protocol import check_protobuf_runtime, pb, pb_grpc

ROOT = Path(__file__).resolve().parents[2]


def field_numbers(descriptor: Descriptor) -> dict[str, int]:
    return {field.name: field.number for field in descriptor.fields}


def test_generated_code_is_up_to_date() -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is needed to regenerate")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_proto import GRPCIO_TOOLS_VERSION, _grpc_tools_version
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    if _grpc_tools_version() != GRPCIO_TOOLS_VERSION:
        pytest.skip(
            f"needs grpcio-tools {GRPCIO_TOOLS_VERSION} (CI runs it in its lowest-versions venv)"
        )
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_model_infer_request_field_numbers() -> None:
    assert field_numbers(pb.ModelInferRequest.DESCRIPTOR) == {
        "model_name": 1,
        "model_version": 2,
        "id": 3,
        "parameters": 4,
        "inputs": 5,
        "outputs": 6,
        "raw_input_contents": 7,
    }
    assert field_numbers(pb.ModelInferRequest.InferInputTensor.DESCRIPTOR) == {
        "name": 1,
        "datatype": 2,
        "shape": 3,
        "parameters": 4,
        "contents": 5,
    }


def test_model_infer_response_field_numbers() -> None:
    assert field_numbers(pb.ModelInferResponse.DESCRIPTOR) == {
        "model_name": 1,
        "model_version": 2,
        "id": 3,
        "parameters": 4,
        "outputs": 5,
        "raw_output_contents": 6,
    }


def test_infer_parameter_is_a_oneof_with_triton_numbering() -> None:
    descriptor = pb.InferParameter.DESCRIPTOR
    assert field_numbers(descriptor) == {
        "bool_param": 1,
        "int64_param": 2,
        "string_param": 3,
        "double_param": 4,
        "uint64_param": 5,
    }
    assert [f.name for f in descriptor.oneofs_by_name["parameter_choice"].fields] == [
        "bool_param",
        "int64_param",
        "string_param",
        "double_param",
        "uint64_param",
    ]
    assert descriptor.fields_by_name["double_param"].type == FieldDescriptor.TYPE_DOUBLE
    assert descriptor.fields_by_name["uint64_param"].type == FieldDescriptor.TYPE_UINT64


def test_tensor_contents_and_stream_response_numbering() -> None:
    assert field_numbers(pb.InferTensorContents.DESCRIPTOR) == {
        "bool_contents": 1,
        "int_contents": 2,
        "int64_contents": 3,
        "uint_contents": 4,
        "uint64_contents": 5,
        "fp32_contents": 6,
        "fp64_contents": 7,
        "bytes_contents": 8,
    }
    assert field_numbers(pb.ModelStreamInferResponse.DESCRIPTOR) == {
        "error_message": 1,
        "infer_response": 2,
    }


def test_service_name_and_streaming_shape() -> None:
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == "inference.GRPCInferenceService"
    stream = service.methods_by_name["ModelStreamInfer"]
    assert stream.input_type.full_name == "inference.ModelInferRequest"
    assert stream.output_type.full_name == "inference.ModelStreamInferResponse"
    assert hasattr(pb_grpc, "add_GRPCInferenceServiceServicer_to_server")


def test_messages_live_in_a_private_descriptor_pool() -> None:
    # tritonclient/MLServer define the same inference.* names in the default pool.
    assert pb.DESCRIPTOR.pool is not descriptor_pool.Default()


# --- Cross-checks against tritonclient's own generated messages ------------------


@pytest.fixture(scope="module")
def triton_pb():
    return pytest.importorskip("tritonclient.grpc.service_pb2")


def as_dict(message) -> dict:
    # Skips unknown fields, so equal dicts mean every field was known, by the same name.
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def assert_same_message_both_ways(triton_message, ours_cls) -> None:
    """Triton bytes parse into ours unchanged, and ours re-serialize to Triton's."""
    wire = triton_message.SerializeToString(deterministic=True)
    ours = ours_cls.FromString(wire)
    assert ours.SerializeToString(deterministic=True) == wire
    assert as_dict(ours) == as_dict(triton_message)
    back = type(triton_message).FromString(ours.SerializeToString())
    assert back == triton_message


def triton_infer_request(triton_pb):
    request = triton_pb.ModelInferRequest(model_name="adder", model_version="2", id="req-1")
    request.parameters["priority"].int64_param = 3
    request.parameters["sequence_start"].bool_param = True
    request.parameters["tag"].string_param = "x"
    request.parameters["scale"].double_param = 0.5
    request.parameters["big"].uint64_param = 2**63 + 1
    typed = request.inputs.add(name="typed", datatype="FP32", shape=[2, 2])
    typed.contents.fp32_contents.extend([1.0, 2.5, -3.0, 4.0])
    typed.parameters["content_type"].string_param = "np"
    words = request.inputs.add(name="words", datatype="BYTES", shape=[2])
    words.contents.bytes_contents.extend([b"hi", b"\x00\xff"])
    request.inputs.add(name="raw", datatype="INT64", shape=[3])
    request.raw_input_contents.append(struct.pack("<3q", 1, -2, 3))
    request.outputs.add(name="sum").parameters["binary_data"].bool_param = True
    return request


def test_triton_model_infer_request_round_trips(triton_pb) -> None:
    request = triton_infer_request(triton_pb)
    assert_same_message_both_ways(request, pb.ModelInferRequest)

    ours = pb.ModelInferRequest.FromString(request.SerializeToString())
    assert ours.model_name == "adder" and ours.id == "req-1"
    assert ours.parameters["big"].uint64_param == 2**63 + 1
    assert ours.parameters["scale"].WhichOneof("parameter_choice") == "double_param"
    assert list(ours.inputs[0].contents.fp32_contents) == [1.0, 2.5, -3.0, 4.0]
    assert list(ours.inputs[1].contents.bytes_contents) == [b"hi", b"\x00\xff"]
    assert struct.unpack("<3q", ours.raw_input_contents[0]) == (1, -2, 3)


def test_typed_contents_of_every_kind_round_trip(triton_pb) -> None:
    contents = triton_pb.InferTensorContents(
        bool_contents=[True, False],
        int_contents=[-(2**31), 7],
        int64_contents=[-(2**63)],
        uint_contents=[2**32 - 1],
        uint64_contents=[2**64 - 1],
        fp32_contents=[1.5],
        fp64_contents=[1e300],
        bytes_contents=[b"abc"],
    )
    assert_same_message_both_ways(contents, pb.InferTensorContents)


def test_triton_stream_response_round_trips(triton_pb) -> None:
    response = triton_pb.ModelStreamInferResponse()
    inner = response.infer_response
    inner.model_name, inner.model_version, inner.id = "adder", "2", "req-1"
    inner.parameters["triton_final_response"].bool_param = True
    out = inner.outputs.add(name="sum", datatype="FP64", shape=[1])
    out.contents.fp64_contents.append(6.25)
    inner.raw_output_contents.append(struct.pack("<d", 6.25))
    assert_same_message_both_ways(response, pb.ModelStreamInferResponse)

    error = triton_pb.ModelStreamInferResponse(error_message="model 'x' is not ready")
    assert pb.ModelStreamInferResponse.FromString(error.SerializeToString()).error_message == (
        "model 'x' is not ready"
    )


def test_triton_repository_messages_round_trip(triton_pb) -> None:
    index = triton_pb.RepositoryIndexResponse()
    index.models.add(name="adder", version="1", state="READY")
    index.models.add(name="broken", version="", state="UNAVAILABLE", reason="load failed")
    assert_same_message_both_ways(index, pb.RepositoryIndexResponse)

    load = triton_pb.RepositoryModelLoadRequest(repository_name="", model_name="adder")
    load.parameters["config"].string_param = "{}"
    load.parameters["file:1/model.bin"].bytes_param = b"\x00\x01"
    load.parameters["poll"].bool_param = False
    load.parameters["n"].int64_param = -1
    assert_same_message_both_ways(load, pb.RepositoryModelLoadRequest)


def test_protobuf_runtime_check_refuses_older_runtimes() -> None:
    check_protobuf_runtime("4.25.1")
    check_protobuf_runtime("7.36.2")
    check_protobuf_runtime("5.26.0rc2")
    with pytest.raises(ImportError, match=r"protobuf>=4\.25\.1.*4\.24\.4 is installed"):
        check_protobuf_runtime("4.24.4")
    with pytest.raises(ImportError, match="pip install"):
        check_protobuf_runtime("3.20.3")
