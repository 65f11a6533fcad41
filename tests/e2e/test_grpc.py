"""gRPC end to end: tritonclient, a plain grpcio client, and REST/gRPC parity."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model, add_sklearn_model
from tests.support.serverproc import ServerProcess

STREAM_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[triton.InferenceServerClient]:
    with triton.InferenceServerClient(server.grpc_address) as client:
        yield client


def triton_input(name: str, array: np.ndarray) -> triton.InferInput:
    tensor = triton.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


# ---- tritonclient ---------------------------------------------------------


def test_health_and_server_metadata(client: triton.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("iris")
    assert client.is_model_ready("double", "1")
    metadata = client.get_server_metadata()
    assert metadata.name == "inferd"
    assert "model_repository" in metadata.extensions


def tensors(metadata: Any) -> list[tuple[str, str, list[int]]]:
    return [(t.name, t.datatype, list(t.shape)) for t in metadata]


def rest_tensors(metadata: list[dict[str, Any]]) -> list[tuple[str, str, list[int]]]:
    return [(t["name"], t["datatype"], t["shape"]) for t in metadata]


@pytest.mark.parametrize(("name", "version"), [("iris", ""), ("double", "2")])
def test_model_metadata_matches_rest(
    client: triton.InferenceServerClient, server: ServerProcess, name: str, version: str
) -> None:
    metadata = client.get_model_metadata(name, version)
    path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "")
    rest = httpx.get(server.url + path).json()
    assert metadata.name == rest["name"] == name
    assert list(metadata.versions) == rest["versions"]
    assert metadata.platform == rest["platform"]
    assert tensors(metadata.inputs) == rest_tensors(rest["inputs"])
    assert tensors(metadata.outputs) == rest_tensors(rest["outputs"])


ALL_DATATYPES = [
    np.array([[True, False, True], [False, False, True]]),
    np.array([[-128, 0, 127], [1, 2, 3]], dtype=np.int8),
    np.array([[-32768, 0, 32767], [1, 2, 3]], dtype=np.int16),
    np.array([[-(2**31), 0, 2**31 - 1], [1, 2, 3]], dtype=np.int32),
    np.array([[-(2**63), 0, 2**63 - 1], [1, 2, 3]], dtype=np.int64),
    np.array([[0, 1, 255], [4, 5, 6]], dtype=np.uint8),
    np.array([[0, 1, 65535], [4, 5, 6]], dtype=np.uint16),
    np.array([[0, 1, 2**32 - 1], [4, 5, 6]], dtype=np.uint32),
    np.array([[0, 1, 2**64 - 1], [4, 5, 6]], dtype=np.uint64),
    np.array([[0.5, -1.25, 65504], [0, 1, 2]], dtype=np.float16),
    np.array([[0.5, -1.25, 3.4e38], [0, 1, 2]], dtype=np.float32),
    np.array([[0.5, -1.25, 1e300], [0, 1, 2]], dtype=np.float64),
    np.array([[b"a", b"", b"\xff\x00binary"], [b"x" * 1000, b"y", "é".encode()]], dtype=object),
]


@pytest.mark.parametrize("array", ALL_DATATYPES, ids=lambda a: np_to_triton_dtype(a.dtype))
def test_infer_every_datatype(client: triton.InferenceServerClient, array: np.ndarray) -> None:
    result = client.infer("echo", [triton_input("x", array)])
    output = result.as_numpy("x")
    assert output.dtype == array.dtype
    assert output.shape == array.shape
    assert output.tolist() == array.tolist()
    assert result.get_output("x").datatype == np_to_triton_dtype(array.dtype)


def test_infer_sklearn_with_id_and_output_selection(
    client: triton.InferenceServerClient, iris_features: np.ndarray
) -> None:
    rows = iris_features[:5].astype(np.float32)
    outputs = [triton.InferRequestedOutput("predict_proba")]
    result = client.infer(
        "iris", [triton_input("input-0", rows)], outputs=outputs, request_id="req-7"
    )
    response = result.get_response()
    assert response.id == "req-7"
    assert [output.name for output in response.outputs] == ["predict_proba"]
    probabilities = result.as_numpy("predict_proba")
    assert probabilities.shape == (5, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)


def test_infer_picks_the_version(client: triton.InferenceServerClient) -> None:
    x = np.array([1.0, 2.0], dtype=np.float32)
    for version in ("1", "2"):
        result = client.infer("double", [triton_input("x", x)], model_version=version)
        assert result.as_numpy("y").tolist() == [2.0, 4.0]
        assert result.as_numpy("version").tolist() == [version.encode()]
        assert result.get_response().model_version == version


def test_parameters_round_trip(client: triton.InferenceServerClient) -> None:
    parameters = {"flag": True, "count": -3, "label": "text"}
    result = client.infer(
        "echo", [triton_input("x", np.zeros(1, np.float32))], parameters=parameters
    )
    received = result.get_response().parameters
    assert received["flag"].bool_param is True
    assert received["count"].int64_param == -3
    assert received["label"].string_param == "text"


def test_streaming_answers_in_order_and_survives_errors(
    client: triton.InferenceServerClient,
) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for index in range(20):
            model = "fails" if index == 7 else "double"
            x = np.array([index], dtype=np.float32)
            client.async_stream_infer(model, [triton_input("x", x)], request_id=str(index))
        received = [answers.get(timeout=STREAM_TIMEOUT) for _ in range(20)]
    finally:
        client.stop_stream()
    for index, (result, error) in enumerate(received):
        if index == 7:
            assert result is None
            assert isinstance(error, InferenceServerException)
            assert "this model always fails" in error.message()
        else:
            assert error is None, error
            assert result.get_response().id == str(index)
            assert result.as_numpy("y").tolist() == [2.0 * index]


def test_repository_index_load_unload(start: Any, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    add_sklearn_model(repository, "iris")
    add_custom_model(repository, "echo", "Echo")
    process = start(repository, settings={"load_models_at_startup": False})
    with triton.InferenceServerClient(process.grpc_address) as client:
        index = client.get_model_repository_index().models
        assert {(m.name, m.state) for m in index} == {
            ("iris", "UNAVAILABLE"),
            ("echo", "UNAVAILABLE"),
        }
        client.load_model("echo")
        assert client.is_model_ready("echo")
        with grpc.insecure_channel(process.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            only_ready = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True)).models
        assert [(m.name, m.state) for m in only_ready] == [("echo", "READY")]
        client.unload_model("echo")
        assert client.is_model_ready("echo") is False  # in the repository, not loaded
        with pytest.raises(InferenceServerException) as raised:
            client.load_model("missing")
        assert raised.value.status() == "StatusCode.NOT_FOUND"


# ---- a plain grpcio client with typed contents ----------------------------

TYPED_CASES: list[tuple[str, str, list[Any]]] = [
    ("BOOL", "bool_contents", [True, False, True]),
    ("INT8", "int_contents", [-128, 0, 127]),
    ("INT16", "int_contents", [-32768, 0, 32767]),
    ("INT32", "int_contents", [-(2**31), 0, 2**31 - 1]),
    ("INT64", "int64_contents", [-(2**63), 0, 2**63 - 1]),
    ("UINT8", "uint_contents", [0, 1, 255]),
    ("UINT16", "uint_contents", [0, 1, 65535]),
    ("UINT32", "uint_contents", [0, 1, 2**32 - 1]),
    ("UINT64", "uint64_contents", [0, 1, 2**64 - 1]),
    ("FP32", "fp32_contents", [0.5, -1.25, 3.0]),
    ("FP64", "fp64_contents", [0.5, -1.25, 1e300]),
    ("BYTES", "bytes_contents", [b"a", b"", b"\xff\x00"]),
]


def typed_request(datatype: str, field: str, values: list[Any], **kwargs: Any) -> Any:
    contents = pb.InferTensorContents(**{field: values})
    tensor = pb.ModelInferRequest.InferInputTensor(
        name="x", datatype=datatype, shape=[len(values)], contents=contents
    )
    return pb.ModelInferRequest(model_name="echo", inputs=[tensor], **kwargs)


RAW_OUTPUT_FALSE = {"raw_output": pb.InferParameter(bool_param=False)}


@pytest.mark.parametrize(("datatype", "field", "values"), TYPED_CASES, ids=lambda c: str(c))
def test_typed_contents_in_and_out(
    stub: pb_grpc.GRPCInferenceServiceStub, datatype: str, field: str, values: list[Any]
) -> None:
    request = typed_request(datatype, field, values, parameters=RAW_OUTPUT_FALSE)
    response = stub.ModelInfer(request)
    assert not response.raw_output_contents
    (output,) = response.outputs
    assert (output.name, output.datatype, list(output.shape)) == ("x", datatype, [3])
    assert list(getattr(output.contents, field)) == values


@pytest.mark.parametrize(("datatype", "field", "values"), TYPED_CASES, ids=lambda c: str(c))
def test_typed_contents_in_raw_out_by_default(
    stub: pb_grpc.GRPCInferenceServiceStub, datatype: str, field: str, values: list[Any]
) -> None:
    response = stub.ModelInfer(typed_request(datatype, field, values))
    (output,) = response.outputs
    assert not output.contents.ListFields()
    (raw,) = response.raw_output_contents
    if datatype == "BYTES":
        assert raw == b"".join(len(v).to_bytes(4, "little") + v for v in values)
    else:
        expected = np.array(values, dtype=triton_dtype(datatype))
        assert raw == expected.tobytes()


def triton_dtype(datatype: str) -> Any:
    from tritonclient.utils import triton_to_np_dtype

    return triton_to_np_dtype(datatype)


def test_every_parameter_kind_round_trips(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    sent = {
        "flag": pb.InferParameter(bool_param=True),
        "count": pb.InferParameter(int64_param=-(2**63)),
        "label": pb.InferParameter(string_param="text"),
        "scale": pb.InferParameter(double_param=0.25),
        "big": pb.InferParameter(uint64_param=2**64 - 1),
    }
    request = typed_request("FP32", "fp32_contents", [1.0], parameters=sent)
    received = stub.ModelInfer(request).parameters
    assert dict(received) == sent


def test_typed_request_keeps_id_and_shape(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(
        name="x",
        datatype="FP32",
        shape=[2, 2],
        contents=pb.InferTensorContents(fp32_contents=[1, 2, 3, 4]),
    )
    request = pb.ModelInferRequest(
        model_name="double", model_version="2", id="abc", inputs=[tensor]
    )
    response = stub.ModelInfer(request)
    assert (response.model_name, response.model_version, response.id) == ("double", "2", "abc")
    y = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
    assert y.reshape(list(response.outputs[0].shape)).tolist() == [[2, 4], [6, 8]]


# ---- the same request over REST and gRPC ----------------------------------


def test_rest_and_grpc_give_the_same_outputs(
    server: ServerProcess, client: triton.InferenceServerClient, iris_features: np.ndarray
) -> None:
    rows = iris_features[::10].astype(np.float32)
    body = {
        "inputs": [
            {
                "name": "input-0",
                "shape": list(rows.shape),
                "datatype": "FP32",
                "data": rows.tolist(),
            }
        ],
        "outputs": [{"name": "predict"}, {"name": "predict_proba"}],
    }
    rest = httpx.post(f"{server.url}/v2/models/iris/infer", json=body).json()
    outputs = [triton.InferRequestedOutput(o["name"]) for o in body["outputs"]]
    result = client.infer("iris", [triton_input("input-0", rows)], outputs=outputs)
    grpc_outputs = result.get_response().outputs
    assert len(grpc_outputs) == len(rest["outputs"]) == 2
    for rest_output, grpc_output in zip(rest["outputs"], grpc_outputs, strict=True):
        assert grpc_output.name == rest_output["name"]
        assert grpc_output.datatype == rest_output["datatype"]
        assert list(grpc_output.shape) == rest_output["shape"]
        grpc_data = result.as_numpy(grpc_output.name).reshape(-1)
        np.testing.assert_array_equal(grpc_data, np.asarray(rest_output["data"]))


@pytest.mark.parametrize("array", ALL_DATATYPES[:-1], ids=lambda a: np_to_triton_dtype(a.dtype))
def test_rest_and_grpc_echo_the_same(
    server: ServerProcess, client: triton.InferenceServerClient, array: np.ndarray
) -> None:
    datatype = np_to_triton_dtype(array.dtype)
    body = {"inputs": [{"name": "x", "shape": list(array.shape), "datatype": datatype}]}
    body["inputs"][0]["data"] = array.reshape(-1).tolist()
    rest = httpx.post(f"{server.url}/v2/models/echo/infer", json=body).json()
    grpc_output = client.infer("echo", [triton_input("x", array)]).as_numpy("x")
    assert "outputs" in rest, rest
    (rest_output,) = rest["outputs"]
    assert rest_output["datatype"] == datatype
    assert rest_output["shape"] == list(grpc_output.shape)
    rest_data = np.asarray(rest_output["data"], dtype=array.dtype)
    assert rest_data.tolist() == grpc_output.reshape(-1).tolist()
