"""BF16 end to end: tritonclient (http and grpc), JSON, and the raw-only rule on gRPC.

The ``echo`` model returns its inputs, so a BF16 answer shows the model was handed
an ``ml_dtypes.bfloat16`` array (a float32 one would come back as FP32).
"""

from __future__ import annotations

import grpc
import httpx
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

from inferd.protocol import pb, pb_grpc
from tests.support.serverproc import ServerProcess

# Exactly representable in bfloat16 (8 bits of mantissa), so tritonclient's
# truncating encoder and our decoder agree to the bit.
VALUES = np.array([[0.5, -1.25, 256.0], [-3.0, 0.0, 1 / 64]], dtype=np.float32)


def set_bf16(
    tensor: tritonclient.http.InferInput | triton_grpc.InferInput, **options: bool
) -> None:
    """VALUES into a BF16 input as the installed tritonclient takes them: since r26.06
    (tritonclient 2.6x) as an ml_dtypes.bfloat16 array, before as float32 it truncates."""
    try:
        tensor.set_data_from_numpy(VALUES.astype(ml_dtypes.bfloat16), **options)
    except InferenceServerException:  # an older client: "expected BF16, got BFLOAT16"
        tensor.set_data_from_numpy(VALUES, **options)


def as_float32(array: np.ndarray | None) -> np.ndarray:
    """An answer as float32 (a newer client gives bfloat16, an older one float32)."""
    assert array is not None
    return array.astype(np.float32)


def test_tritonclient_http_binary_round_trip(
    triton_http: tritonclient.http.InferenceServerClient,
) -> None:
    tensor = tritonclient.http.InferInput("x", list(VALUES.shape), "BF16")
    set_bf16(tensor, binary_data=True)
    output = tritonclient.http.InferRequestedOutput("x", binary_data=True)
    result = triton_http.infer("echo", [tensor], outputs=[output])
    assert result.get_output("x")["datatype"] == "BF16"
    np.testing.assert_array_equal(as_float32(result.as_numpy("x")), VALUES)


def test_tritonclient_grpc_round_trip(server: ServerProcess) -> None:
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        tensor = triton_grpc.InferInput("x", list(VALUES.shape), "BF16")
        set_bf16(tensor)
        result = client.infer("echo", [tensor])
    assert result.get_output("x").datatype == "BF16"
    np.testing.assert_array_equal(as_float32(result.as_numpy("x")), VALUES)


def test_json_data_is_rounded_to_bf16_and_written_as_numbers(rest: httpx.Client) -> None:
    body = {"inputs": [{"name": "x", "datatype": "BF16", "shape": [3], "data": [0.1, -2, 3e38]}]}
    response = rest.post("/v2/models/echo/infer", json=body)
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    assert (output["datatype"], output["shape"]) == ("BF16", [3])
    expected = np.array([0.1, -2, 3e38]).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(np.array(output["data"], dtype=np.float32), expected)
    assert output["data"][0] != 0.1  # rounded to bfloat16, not passed through


def test_json_data_that_is_not_numbers_is_refused(rest: httpx.Client) -> None:
    body = {"inputs": [{"name": "x", "datatype": "BF16", "shape": [1], "data": ["a"]}]}
    response = rest.post("/v2/models/echo/infer", json=body)
    assert response.status_code == 400
    assert response.json() == {"error": "Input 'x': BF16 data must be numbers"}


def test_grpc_raw_bytes_of_the_wrong_size_are_refused(
    stub: pb_grpc.GRPCInferenceServiceStub,
) -> None:
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="BF16", shape=[2])
    request.raw_input_contents.append(b"\x00" * 3)
    with pytest.raises(grpc.RpcError) as raised:
        stub.ModelInfer(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "needs 4 bytes, got 3" in raised.value.details()


def test_grpc_bf16_travels_raw_only(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    raw = VALUES.astype(ml_dtypes.bfloat16).tobytes()
    request = pb.ModelInferRequest(model_name="echo")
    request.inputs.add(name="x", datatype="BF16", shape=list(VALUES.shape))
    request.raw_input_contents.append(raw)
    response = stub.ModelInfer(request)
    assert response.raw_output_contents[0] == raw  # bit for bit
    request.parameters["raw_output"].bool_param = False
    with pytest.raises(grpc.RpcError) as raised:
        stub.ModelInfer(request)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "BF16, which has no typed contents field" in raised.value.details()
