"""gRPC fuzzed as REST is (test_docs.py): malformed messages get a clear client error.

Hypothesis sends each method of the inference service arbitrary bytes (most of
them not a protobuf message at all) and well-formed messages with wrong contents
(unknown models and datatypes, shapes that do not match the data, absurd sizes,
parameters of every type). The server must answer each with OK or a client
error: never UNKNOWN (an unhandled exception in a handler) or INTERNAL (a bug of
ours; the models fuzzed here do not fail), and it must keep serving. Calls go
through a raw channel with identity serializers, so the bytes reach the server
as generated. Seeded (derandomized): the same cases on every run, so a failure
reproduces; few examples, so the suite stays fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferd.protocol import pb
from inferd.tensors.datatypes import DATATYPES
from tests.support.serverproc import ServerProcess

SERVICE = "/inference.GRPCInferenceService/"
# Methods that change nothing on the shared server (load and unload would).
UNARY_METHODS = (
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelInfer",
    "ModelStatistics",
    "RepositoryIndex",
)
FORBIDDEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
INTERNAL_ERROR = "Internal server error"
CALL_TIMEOUT = 10.0
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# Models of the shared server that check their inputs (or need none), and names of
# none: "fails" fails on purpose and "double", a test model, fails without an "x".
MODELS = ("echo", "iris", "typed", "nope", "")


def identity(data: bytes) -> bytes:
    return data


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_address) as opened:
        yield opened


def call_unary(channel: grpc.Channel, method: str, body: bytes) -> None:
    """Send ``body`` as the request; fail on a forbidden status code."""
    rpc = channel.unary_unary(
        SERVICE + method, request_serializer=identity, response_deserializer=identity
    )
    try:
        rpc(body, timeout=CALL_TIMEOUT)
    except grpc.RpcError as error:
        code = error.code()
        assert code not in FORBIDDEN, f"{method} answered {code}: {error.details()}"
        assert code is not grpc.StatusCode.DEADLINE_EXCEEDED, f"{method} hung"


def call_stream(channel: grpc.Channel, bodies: list[bytes]) -> None:
    """Send ``bodies`` on one ModelStreamInfer call; errors of single requests come back
    as messages of the stream: none may be an internal error."""
    rpc = channel.stream_stream(
        SERVICE + "ModelStreamInfer", request_serializer=identity, response_deserializer=identity
    )
    try:
        for answer in rpc(iter(bodies), timeout=CALL_TIMEOUT):
            message = pb.ModelStreamInferResponse.FromString(answer)
            assert INTERNAL_ERROR not in message.error_message, message.error_message
    except grpc.RpcError as error:
        code = error.code()
        assert code not in FORBIDDEN, f"ModelStreamInfer answered {code}: {error.details()}"
        assert code is not grpc.StatusCode.DEADLINE_EXCEEDED, "ModelStreamInfer hung"


# Well-formed messages with wrong contents.

names = st.sampled_from(["x", "text", "image", "", "é", "y" * 300])
int64s = st.integers(-(2**63), 2**63 - 1)
parameter_values = st.one_of(
    st.builds(pb.InferParameter, bool_param=st.booleans()),
    st.builds(pb.InferParameter, int64_param=int64s),
    st.builds(pb.InferParameter, string_param=st.text(max_size=20)),
    st.builds(pb.InferParameter, double_param=st.floats(allow_nan=True)),
    st.builds(pb.InferParameter, uint64_param=st.integers(0, 2**64 - 1)),
)
# Parameters that mean something to inferd, and any others.
parameter_names = st.sampled_from(
    ["content_type", "binary_data", "binary_data_size", "classification", "timeout",
     "priority", "sequence_id", "headers", "other"]
)  # fmt: skip
parameters = st.dictionaries(parameter_names, parameter_values, max_size=3)
shapes = st.lists(st.one_of(st.integers(-2, 5), int64s), max_size=4)
contents = st.builds(
    pb.InferTensorContents,
    bool_contents=st.lists(st.booleans(), max_size=8),
    int_contents=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8),
    int64_contents=st.lists(int64s, max_size=8),
    uint64_contents=st.lists(st.integers(0, 2**64 - 1), max_size=8),
    fp32_contents=st.lists(st.floats(width=32), max_size=8),
    bytes_contents=st.lists(st.binary(max_size=8), max_size=8),
)
inputs = st.builds(
    pb.ModelInferRequest.InferInputTensor,
    name=names,
    datatype=st.one_of(st.sampled_from(sorted(DATATYPES)), st.text(max_size=6)),
    shape=shapes,
    parameters=parameters,
    contents=st.one_of(st.none(), contents),
)
infer_requests = st.builds(
    pb.ModelInferRequest,
    model_name=st.sampled_from(MODELS),
    model_version=st.sampled_from(["", "1", "2", "-1", "v"]),
    id=st.text(max_size=8),
    parameters=parameters,
    inputs=st.lists(inputs, max_size=3),
    outputs=st.lists(
        st.builds(
            pb.ModelInferRequest.InferRequestedOutputTensor, name=names, parameters=parameters
        ),
        max_size=2,
    ),
    raw_input_contents=st.lists(st.binary(max_size=64), max_size=3),
)


@FUZZ
@given(method=st.sampled_from(UNARY_METHODS), body=st.binary(max_size=512))
def test_arbitrary_bytes_get_a_client_error(
    channel: grpc.Channel, method: str, body: bytes
) -> None:
    call_unary(channel, method, body)


@FUZZ
@given(request=infer_requests)
def test_infer_requests_with_wrong_contents_get_a_client_error(
    channel: grpc.Channel, request: Any
) -> None:
    call_unary(channel, "ModelInfer", request.SerializeToString())


@settings(FUZZ, max_examples=40)
@given(bodies=st.lists(st.one_of(st.binary(max_size=128), infer_requests.map(
    lambda request: request.SerializeToString())), min_size=1, max_size=3))  # fmt: skip
def test_a_stream_of_malformed_requests_gets_clear_errors(
    channel: grpc.Channel, bodies: list[bytes]
) -> None:
    call_stream(channel, bodies)


@FUZZ
@given(
    method=st.sampled_from(["ModelReady", "ModelMetadata", "ModelStatistics"]),
    name=st.one_of(st.sampled_from(MODELS), st.text(max_size=10)),
    version=st.one_of(st.sampled_from(["", "1", "2"]), st.text(max_size=5)),
)
def test_model_requests_naming_anything_get_a_client_error(
    channel: grpc.Channel, method: str, name: str, version: str
) -> None:
    message = getattr(pb, f"{method}Request")(name=name, version=version)
    call_unary(channel, method, message.SerializeToString())


def test_the_server_serves_on_after_the_fuzzing(server: ServerProcess) -> None:
    assert server.process.poll() is None
    with grpc.insecure_channel(server.grpc_address) as opened:
        live = opened.unary_unary(
            SERVICE + "ServerLive",
            request_serializer=pb.ServerLiveRequest.SerializeToString,
            response_deserializer=pb.ServerLiveResponse.FromString,
        )
        assert live(pb.ServerLiveRequest(), timeout=CALL_TIMEOUT).live
