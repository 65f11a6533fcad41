"""The binary tensor data extension: by hand on the wire, and through tritonclient's HTTP client."""

from __future__ import annotations

import json
import struct
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from .conftest import TYPED_METADATA

ARRAYS: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True], [False, False, True]]),
    "UINT8": np.array([[0, 1, 255], [7, 8, 9]], dtype=np.uint8),
    "UINT16": np.array([[0, 1, 65535], [7, 8, 9]], dtype=np.uint16),
    "UINT32": np.array([[0, 1, 2**32 - 1], [7, 8, 9]], dtype=np.uint32),
    "UINT64": np.array([[0, 1, 2**64 - 1], [7, 8, 9]], dtype=np.uint64),
    "INT8": np.array([[-128, 0, 127], [7, -8, 9]], dtype=np.int8),
    "INT16": np.array([[-(2**15), 0, 2**15 - 1], [7, -8, 9]], dtype=np.int16),
    "INT32": np.array([[-(2**31), 0, 2**31 - 1], [7, -8, 9]], dtype=np.int32),
    "INT64": np.array([[-(2**63), 0, 2**63 - 1], [7, -8, 9]], dtype=np.int64),
    "FP16": np.array([[0.5, -1.25, 65504], [-65504, 0, 1e-3]], dtype=np.float16),
    "FP32": np.array([[0.5, -1.25, 3e38], [-3e38, 0, 1e-3]], dtype=np.float32),
    "FP64": np.array([[0.1, -1e300, 1e-300], [1e300, 0, 2]], dtype=np.float64),
    "BYTES": np.array([[b"", b"a", b"\x00\xff"], [b"h\xc3\xa9", b"x" * 300, b"z"]], dtype=object),
}
TEXT_BYTES = np.array([[b"", b"a", b"b c"], ["h\u00e9".encode(), b"x" * 300, b"z"]], dtype=object)


def raw_bytes(array: np.ndarray) -> bytes:
    """The extension's encoding: little-endian values; BYTES as 4-byte length + bytes."""
    if array.dtype == object:
        return b"".join(struct.pack("<I", len(item)) + item for item in array.reshape(-1))
    return array.astype(array.dtype.newbyteorder("<")).tobytes()


def from_raw(datatype: str, shape: list[int], raw: bytes) -> np.ndarray:
    if datatype != "BYTES":
        return np.frombuffer(raw, dtype=ARRAYS[datatype].dtype.newbyteorder("<")).reshape(shape)
    items, offset = [], 0
    while offset < len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        items.append(raw[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return np.array(items, dtype=object).reshape(shape)


def post_binary(
    rest: httpx.Client, model: str, header: dict[str, Any], payload: bytes
) -> httpx.Response:
    head = json.dumps(header).encode()
    return rest.post(
        f"/v2/models/{model}/infer",
        content=head + payload,
        headers={
            "Inference-Header-Content-Length": str(len(head)),
            "Content-Type": "application/octet-stream",
        },
    )


def split_response(response: httpx.Response) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON header and every output, binary ones decoded from the raw tail."""
    assert response.status_code == 200, response.text
    length = int(response.headers["Inference-Header-Content-Length"])
    assert response.headers["content-type"] == "application/octet-stream"
    header = json.loads(response.content[:length])
    offset = length
    arrays = {}
    for output in header["outputs"]:
        size = output.get("parameters", {}).get("binary_data_size")
        if size is None:
            continue
        raw = response.content[offset : offset + size]
        arrays[output["name"]] = from_raw(output["datatype"], output["shape"], raw)
        offset += size
    assert offset == len(response.content), "no bytes beyond the outputs"
    return header, arrays


def test_binary_inputs_and_outputs_on_the_wire(rest: httpx.Client) -> None:
    inputs = [
        {
            "name": datatype.lower(),
            "datatype": datatype,
            "shape": list(array.shape),
            "parameters": {"binary_data_size": len(raw_bytes(array))},
        }
        for datatype, array in ARRAYS.items()
    ]
    payload = b"".join(raw_bytes(array) for array in ARRAYS.values())
    header = {"id": "b1", "inputs": inputs, "parameters": {"binary_data_output": True}}
    response_header, arrays = split_response(post_binary(rest, "echo", header, payload))
    assert response_header["id"] == "b1"
    for datatype, array in ARRAYS.items():
        output = arrays[datatype.lower()]
        np.testing.assert_array_equal(output, array, strict=True)


@pytest.mark.parametrize("datatype", ["FP16", "FP32", "FP64"])
def test_binary_floats_keep_values_json_cannot_carry(rest: httpx.Client, datatype: str) -> None:
    special = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=ARRAYS[datatype].dtype)
    parameters = {"binary_data_size": special.nbytes}
    input_header = {"name": "f", "datatype": datatype, "shape": [4], "parameters": parameters}
    header = {"inputs": [input_header], "parameters": {"binary_data_output": True}}
    _, arrays = split_response(post_binary(rest, "echo", header, raw_bytes(special)))
    assert arrays["f"].tobytes() == special.tobytes()


def test_binary_data_chooses_per_output(rest: httpx.Client) -> None:
    x = np.array([1.5, 2.5], dtype=np.float32)
    header = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": x.tolist()}],
        "outputs": [
            {"name": "y", "parameters": {"binary_data": True}},
            {"name": "version", "parameters": {"binary_data": False}},
            {"name": "pid"},
        ],
    }
    response_header, arrays = split_response(rest.post("/v2/models/double/infer", json=header))
    np.testing.assert_array_equal(arrays["y"], x * 2, strict=True)
    outputs = {output["name"]: output for output in response_header["outputs"]}
    assert outputs["version"]["data"] == ["2"]
    assert "data" in outputs["pid"], "outputs without binary_data stay JSON by default"
    assert set(arrays) == {"y"}


def test_binary_data_false_overrides_binary_data_output(rest: httpx.Client) -> None:
    header = {
        "inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [4]}],
        "parameters": {"binary_data_output": True},
        "outputs": [{"name": "y", "parameters": {"binary_data": False}}],
    }
    response = rest.post("/v2/models/double/infer", json=header)
    assert "Inference-Header-Content-Length" not in response.headers
    assert response.json()["outputs"][0]["data"] == [8]


def test_binary_and_json_inputs_mix(rest: httpx.Client) -> None:
    text = np.array([b"one", b"\xfe"], dtype=object)
    header = {
        "inputs": [
            {"name": "n", "datatype": "INT16", "shape": [2], "data": [1, -2]},
            {
                "name": "text",
                "datatype": "BYTES",
                "shape": [2],
                "parameters": {"binary_data_size": len(raw_bytes(text))},
            },
        ],
        "outputs": [{"name": "text", "parameters": {"binary_data": True}}, {"name": "n"}],
    }
    response_header, arrays = split_response(post_binary(rest, "echo", header, raw_bytes(text)))
    np.testing.assert_array_equal(arrays["text"], text)
    assert response_header["outputs"][1]["data"] == [1, -2]


def triton_input(name: str, array: np.ndarray, binary: bool) -> triton.InferInput:
    datatype = next(dt for dt, a in ARRAYS.items() if a.dtype == array.dtype)
    tensor = triton.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


@pytest.mark.parametrize("binary_inputs", [True, False], ids=["binary-in", "json-in"])
@pytest.mark.parametrize("binary_outputs", [True, False], ids=["binary-out", "json-out"])
def test_tritonclient_every_datatype(
    triton_http: triton.InferenceServerClient, binary_inputs: bool, binary_outputs: bool
) -> None:
    arrays = dict(ARRAYS)
    if not (binary_inputs and binary_outputs):
        arrays["BYTES"] = TEXT_BYTES  # JSON carries BYTES as UTF-8 strings only
    inputs = [triton_input(dt.lower(), array, binary_inputs) for dt, array in arrays.items()]
    outputs = [triton.InferRequestedOutput(dt.lower(), binary_data=binary_outputs) for dt in arrays]
    result = triton_http.infer("echo", inputs, outputs=outputs, request_id="t1")
    assert result.get_response()["id"] == "t1"
    for datatype, array in arrays.items():
        received = result.as_numpy(datatype.lower())
        assert received is not None
        if datatype == "BYTES" and not binary_outputs:
            received = np.vectorize(str.encode, otypes=[object])(received)
        np.testing.assert_array_equal(received, array, strict=True)


def test_tritonclient_defaults_with_versions(triton_http: triton.InferenceServerClient) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for version in ("1", "2", ""):
        result = triton_http.infer("double", [triton_input("x", x, True)], model_version=version)
        np.testing.assert_array_equal(result.as_numpy("y"), x * 2, strict=True)
        expected_version = version or "2"
        assert result.get_response()["model_version"] == expected_version
        assert result.as_numpy("version").tolist() == [expected_version.encode()]


def test_tritonclient_passes_parameters(triton_http: triton.InferenceServerClient) -> None:
    x = np.array([1], dtype=np.int8)
    result = triton_http.infer("echo", [triton_input("x", x, True)], parameters={"k": "v"})
    assert result.get_response()["parameters"]["k"] == "v"


def test_tritonclient_gzip_both_ways(triton_http: triton.InferenceServerClient) -> None:
    x = np.tile(np.arange(100, dtype=np.float64), 100)
    result = triton_http.infer(
        "double",
        [triton_input("x", x, True)],
        request_compression_algorithm="gzip",
        response_compression_algorithm="gzip",
    )
    np.testing.assert_array_equal(result.as_numpy("y"), x * 2, strict=True)


def test_tritonclient_health_and_metadata(triton_http: triton.InferenceServerClient) -> None:
    assert triton_http.is_server_live()
    assert triton_http.is_server_ready()
    assert triton_http.is_model_ready("iris")
    assert triton_http.is_model_ready("double", "1")
    assert not triton_http.is_model_ready("double", "3")
    assert not triton_http.is_model_ready("nope")
    metadata = triton_http.get_server_metadata()
    assert metadata["name"] == "inferd"
    assert "binary_tensor_data" in metadata["extensions"]
    assert triton_http.get_model_metadata("typed") == {"name": "typed", **TYPED_METADATA}
    assert triton_http.get_model_metadata("double", "1")["name"] == "double"


def test_tritonclient_sees_errors(triton_http: triton.InferenceServerClient) -> None:
    x = np.array([1], dtype=np.float32)
    with pytest.raises(InferenceServerException) as missing:
        triton_http.infer("nope", [triton_input("x", x, True)])
    assert missing.value.status() == "404"
    assert "Request for unknown model: 'nope' is not found" in missing.value.message()
    with pytest.raises(InferenceServerException) as failing:
        triton_http.infer("fails", [triton_input("x", x, True)])
    assert failing.value.status() == "500"
    assert "this model always fails" in failing.value.message()
