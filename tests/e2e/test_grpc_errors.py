"""gRPC status codes: each core error reaches the client with a code and a clear message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model, write_model_folder
from tests.support.serverproc import ServerProcess

Code = grpc.StatusCode
SERVICE = "/inference.GRPCInferenceService/"
MODEL_INFER = SERVICE + "ModelInfer"

# A runtime that refuses work as an overloaded server does (written into a model folder).
BUSY_RUNTIME = """
from inferd import Model
from inferd.errors import Overloaded


class Busy(Model):
    def predict(self, request):
        raise Overloaded("Model 'busy' has too many requests waiting; retry later")
"""


def fp32_input(name: str = "x", shape: tuple[int, ...] = (2,)) -> Any:
    return pb.ModelInferRequest.InferInputTensor(name=name, datatype="FP32", shape=shape)


def raw_request(model: str, raw: bytes, version: str = "", **input_kwargs: Any) -> Any:
    return pb.ModelInferRequest(
        model_name=model,
        model_version=version,
        inputs=[fp32_input(**input_kwargs)],
        raw_input_contents=[raw],
    )


def typed_request(datatype: str, shape: list[int], **contents: list[Any]) -> Any:
    """An ``echo`` request with one input ``x`` whose values are in typed ``contents``."""
    tensor = pb.ModelInferRequest.InferInputTensor(
        name="x", datatype=datatype, shape=shape, contents=pb.InferTensorContents(**contents)
    )
    return pb.ModelInferRequest(model_name="echo", inputs=[tensor])


TWO_FLOATS = np.array([1.0, 2.0], dtype=np.float32).tobytes()


def rpc_error(call: Any, request: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call(request)
    return raised.value


BAD_REQUESTS: list[tuple[str, Any, str]] = [
    ("no model name", raw_request("", TWO_FLOATS), "model_name is required"),
    ("raw size", raw_request("echo", b"\x00" * 7), "needs 8 bytes, got 7"),
    (
        "no data",
        pb.ModelInferRequest(model_name="echo", inputs=[fp32_input()], raw_input_contents=[]),
        "Input 'x' has no data",
    ),
    (
        "unknown datatype",
        pb.ModelInferRequest(
            model_name="echo",
            inputs=[pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP8", shape=[1])],
            raw_input_contents=[b"\x00"],
        ),
        "Unsupported datatype 'FP8'",
    ),
    (
        "negative shape",
        raw_request("echo", TWO_FLOATS, shape=(-2,)),
        "must be a list of non-negative integers",
    ),
    (
        "wrong typed field",
        typed_request("FP32", [1], fp64_contents=[1.0]),
        "belongs in contents.fp32_contents, not contents.fp64_contents",
    ),
    (
        "typed count",
        typed_request("INT32", [3], int_contents=[1, 2]),
        "needs 3 elements, contents.int_contents has 2",
    ),
    (
        "typed out of range",
        typed_request("UINT8", [1], uint_contents=[256]),
        "values out of range for UINT8",
    ),
    (
        "FP16 typed",
        typed_request("FP16", [0]),
        "send it in raw_input_contents",
    ),
    (
        "too many dimensions",
        raw_request("echo", TWO_FLOATS[:4], shape=(1,) * 33),
        "33 dimensions; at most 32",
    ),
    ("too large to size", raw_request("echo", b"", shape=(0, 2**62)), "too large for a tensor"),
    ("typed, too large", typed_request("INT32", [0, 2**62]), "too large for a tensor"),
    (
        "BF16 typed",
        typed_request("BF16", [1], fp32_contents=[1.0]),
        "BF16 has no typed contents field; send it in raw_input_contents",
    ),
    (
        "duplicate input",
        pb.ModelInferRequest(
            model_name="echo",
            inputs=[fp32_input(), fp32_input()],
            raw_input_contents=[TWO_FLOATS, TWO_FLOATS],
        ),
        "appears more than once",
    ),
    (
        "NaN timeout",  # wedged the model's queue before it was refused
        pb.ModelInferRequest(
            model_name="echo",
            inputs=[fp32_input()],
            raw_input_contents=[TWO_FLOATS],
            parameters={"timeout": pb.InferParameter(double_param=float("nan"))},
        ),
        "'timeout' must be a number of microseconds >= 0",
    ),
    (
        "raw_output not bool",
        pb.ModelInferRequest(
            model_name="echo",
            inputs=[fp32_input()],
            raw_input_contents=[TWO_FLOATS],
            parameters={"raw_output": pb.InferParameter(string_param="no")},
        ),
        "'raw_output' must be a bool",
    ),
    (
        "unknown output",
        pb.ModelInferRequest(
            model_name="echo",
            inputs=[fp32_input()],
            raw_input_contents=[TWO_FLOATS],
            outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="nope")],
        ),
        "has no output named 'nope'",
    ),
]


@pytest.mark.parametrize(
    ("request_", "message"), [c[1:] for c in BAD_REQUESTS], ids=[c[0] for c in BAD_REQUESTS]
)
def test_bad_input_is_invalid_argument(
    stub: pb_grpc.GRPCInferenceServiceStub, request_: Any, message: str
) -> None:
    error = rpc_error(stub.ModelInfer, request_)
    assert error.code() == Code.INVALID_ARGUMENT
    assert message in error.details()


def test_unknown_model_and_version_are_not_found(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    error = rpc_error(stub.ModelInfer, raw_request("missing", TWO_FLOATS))
    assert error.code() == Code.NOT_FOUND
    assert error.details() == "Request for unknown model: 'missing' is not found"
    error = rpc_error(stub.ModelInfer, raw_request("double", TWO_FLOATS, version="9"))
    assert error.code() == Code.NOT_FOUND
    assert error.details() == "Request for unknown model: 'double' version 9 is not found"
    for call, request in [
        (stub.ModelMetadata, pb.ModelMetadataRequest(name="missing")),
        (stub.ModelReady, pb.ModelReadyRequest(name="double", version="9")),
        (stub.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="missing")),
    ]:
        assert rpc_error(call, request).code() == Code.NOT_FOUND


def test_model_failure_is_internal(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    error = rpc_error(stub.ModelInfer, raw_request("fails", TWO_FLOATS))
    assert error.code() == Code.INTERNAL
    assert error.details() == "Model 'fails' failed: ValueError: this model always fails"


def test_unsupported_repository_parameters_are_refused(
    stub: pb_grpc.GRPCInferenceServiceStub,
) -> None:
    # "config" is supported now (a configuration override, test_triton_config.py).
    poll = pb.ModelRepositoryParameter(string_param="{}")
    request = pb.RepositoryModelLoadRequest(model_name="echo", parameters={"poll": poll})
    error = rpc_error(stub.RepositoryModelLoad, request)
    assert error.code() == Code.INVALID_ARGUMENT
    assert "Repository parameters (poll) are not supported" in error.details()


def test_not_ready_and_overloaded_are_unavailable(start: Any, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    add_custom_model(repository, "broken", "FailsToLoad")
    files = {"busyruntime.py": BUSY_RUNTIME}
    write_model_folder(repository, "busy", "busyruntime.Busy", files=files)
    # "broken" never becomes ready, so neither does the server: wait for liveness.
    process = start(repository, wait="/v2/health/live")
    process.wait_until("/v2/models/busy/ready")
    with grpc.insecure_channel(process.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        error = rpc_error(stub.ModelInfer, raw_request("broken", TWO_FLOATS))
        assert error.code() == Code.UNAVAILABLE
        assert "Model 'broken' is unavailable" in error.details()
        assert "cannot find the weights" in error.details()
        assert not [key for key, _ in error.trailing_metadata() if key.endswith("pushback-ms")]
        error = rpc_error(stub.ModelInfer, raw_request("busy", TWO_FLOATS))
        assert error.code() == Code.UNAVAILABLE
        assert error.details() == "Model 'busy' has too many requests waiting; retry later"
        # When to retry, for clients with a retry policy (Retry-After's gRPC twin).
        assert ("grpc-retry-pushback-ms", "1000") in error.trailing_metadata()
        assert not stub.ServerReady(pb.ServerReadyRequest()).ready


def test_message_size_limit(start: Any, tmp_path: Path) -> None:
    add_custom_model(tmp_path, "echo", "Echo")
    process = start(settings={"grpc_max_message_length": 64 * 1024})
    with grpc.insecure_channel(process.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        small = np.zeros(1024, dtype=np.float32).tobytes()
        assert stub.ModelInfer(raw_request("echo", small, shape=(1024,))).outputs
        large = np.zeros(32 * 1024, dtype=np.float32).tobytes()
        error = rpc_error(stub.ModelInfer, raw_request("echo", large, shape=(32 * 1024,)))
        assert error.code() == Code.RESOURCE_EXHAUSTED
        assert "larger than max" in error.details()
        # 40 KiB in, but ~80 KB as typed contents (2-byte varints): too big to send back.
        typed_answer = pb.ModelInferRequest(
            model_name="echo",
            inputs=[
                pb.ModelInferRequest.InferInputTensor(name="x", datatype="UINT8", shape=[40960])
            ],
            raw_input_contents=[np.full(40960, 200, dtype=np.uint8).tobytes()],
            parameters={"raw_output": pb.InferParameter(bool_param=False)},
        )
        error = rpc_error(stub.ModelInfer, typed_answer)
        assert error.code() == Code.RESOURCE_EXHAUSTED
        assert "over grpc_max_message_length (65536)" in error.details()
        assert "leave out the raw_output parameter" in error.details()
        # In a stream that request alone fails; the stream goes on.
        answers = list(
            stub.ModelStreamInfer(iter([typed_answer, raw_request("echo", small, shape=(1024,))]))
        )
        assert "over grpc_max_message_length" in answers[0].error_message
        assert not answers[1].error_message and answers[1].infer_response.outputs
    assert "Traceback" not in process.log()


def test_a_100_mb_tensor_fits_by_default(server: ServerProcess) -> None:
    count = 25 * 1024 * 1024  # 100 MiB of FP32
    data = np.arange(count, dtype=np.float32)
    request = raw_request("echo", data.tobytes(), shape=(count,))
    # The client's own receive limit defaults to 4 MiB.
    options = [("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_address, options=options) as channel:
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    echoed = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
    assert echoed.shape == (count,)
    assert echoed[-1] == count - 1


def test_a_message_protobuf_cannot_parse_is_invalid_argument(server: ServerProcess) -> None:
    garbage = b"\xff\xff\xff not protobuf"
    with grpc.insecure_channel(server.grpc_address) as channel:
        error = rpc_error(channel.unary_unary(MODEL_INFER), garbage)
        assert error.code() == Code.INVALID_ARGUMENT
        assert error.details().startswith(
            "The request is not a valid inference.ModelInferRequest message"
        )
        error = rpc_error(channel.unary_unary(SERVICE + "ModelMetadata"), garbage)
        assert error.code() == Code.INVALID_ARGUMENT
        assert "not a valid inference.ModelMetadataRequest message" in error.details()
    assert "DecodeError" not in server.log()  # a client's mistake, not a server fault


def test_a_stream_answers_a_malformed_message_and_goes_on(server: ServerProcess) -> None:
    valid = raw_request("echo", TWO_FLOATS).SerializeToString()
    with grpc.insecure_channel(server.grpc_address) as channel:
        stream = channel.stream_stream(SERVICE + "ModelStreamInfer")
        answers = [
            pb.ModelStreamInferResponse.FromString(answer)
            for answer in stream(iter([b"\xff\xff\xff", valid]), timeout=30)
        ]
    assert answers[0].error_message.startswith("The request is not a valid")
    assert not answers[1].error_message
    assert answers[1].infer_response.model_name == "echo"
