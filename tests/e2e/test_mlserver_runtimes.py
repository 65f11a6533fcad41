"""MLServer custom runtimes (folders written against MLServer 1.7's API, importing
``mlserver``) served unchanged, in process and with 2 worker processes, over REST
(JSON and binary) and gRPC."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from tests.support.serverproc import ServerProcess, start_server

from .metrics_helpers import scrape, value
from .mlserver_folders import copy_folders

TIMEOUT = 30


@pytest.fixture(scope="module", params=[0, 2], ids=["in-process", "2-workers"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository = copy_folders(tmp_path_factory.mktemp(f"mlserver-runtimes-{request.param}"))
    with start_server(repository, {"parallel_workers": request.param}) as process:
        yield process


@pytest.fixture(scope="module")
def rest(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
        yield client


@pytest.fixture(scope="module")
def grpc_client(server: ServerProcess) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        yield client


def infer(rest: httpx.Client, model: str, *inputs: dict[str, Any], **body: Any) -> dict[str, Any]:
    response = rest.post(f"/v2/models/{model}/infer", json={"inputs": list(inputs), **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_decode_args_numpy_model_over_rest_json(rest: httpx.Client) -> None:
    x = {"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]}
    answer = infer(rest, "numpy-model", x)
    assert answer["model_name"] == "numpy-model" and answer["model_version"] == "v1"
    assert answer["outputs"] == [
        {
            "name": "output-0",
            "datatype": "FP32",
            "shape": [2, 2],
            "data": [2.5, 4.5, 6.5, 8.5],
            "parameters": {"content_type": "np"},
        }
    ]


def test_decode_args_numpy_model_over_rest_binary(server: ServerProcess) -> None:
    client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    x = triton_http.InferInput("x", [3, 1], "FP64")
    x.set_data_from_numpy(np.array([[1.0], [2.0], [3.0]]), binary_data=True)
    output = triton_http.InferRequestedOutput("output-0", binary_data=True)
    result = client.infer("numpy-model", [x], outputs=[output])
    np.testing.assert_array_equal(result.as_numpy("output-0"), [[2.5], [4.5], [6.5]])
    assert result.get_output("output-0")["datatype"] == "FP64"
    client.close()


def test_decode_args_numpy_model_over_grpc(grpc_client: triton_grpc.InferenceServerClient) -> None:
    x = triton_grpc.InferInput("x", [2], "INT32")
    x.set_data_from_numpy(np.array([1, 2], dtype=np.int32))
    result = grpc_client.infer("numpy-model", [x])
    # int32 * 2 + 0.5 is float64, as numpy computes it in the model
    np.testing.assert_array_equal(result.as_numpy("output-0"), [[2.5], [4.5]])
    assert result.get_output("output-0").datatype == "FP64"
    assert result.get_output("output-0").shape == [2, 1]


def test_string_codec_model_over_rest_and_grpc(
    rest: httpx.Client, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    text = {"name": "text", "datatype": "BYTES", "shape": [2], "data": ["ab", "héllo"]}
    answer = infer(rest, "text-model", text)
    assert answer["parameters"] == {"content_type": "str", "seen": 2}
    upper, lengths = answer["outputs"]
    assert upper == {
        "name": "upper",
        "datatype": "BYTES",
        "shape": [2, 1],
        "data": ["AB", "HÉLLO"],
        "parameters": {"content_type": "str"},
    }
    assert lengths["data"] == ["2", "5"]
    grpc_text = triton_grpc.InferInput("text", [1], "BYTES")
    grpc_text.set_data_from_numpy(np.array([b"grpc"], dtype=object))
    result = grpc_client.infer("text-model", [grpc_text])
    assert result.as_numpy("upper").tolist() == [[b"GRPC"]]


def test_mlserver_error_keeps_its_status(
    rest: httpx.Client, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    text = {"name": "text", "datatype": "BYTES", "shape": [1], "data": [""]}
    response = rest.post("/v2/models/text-model/infer", json={"inputs": [text]})
    assert response.status_code == 400
    assert response.json() == {"error": "empty text is not allowed"}
    grpc_text = triton_grpc.InferInput("text", [1], "BYTES")
    grpc_text.set_data_from_numpy(np.array([b""], dtype=object))
    with pytest.raises(InferenceServerException) as raised:
        grpc_client.infer("text-model", [grpc_text])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "empty text is not allowed" in raised.value.message()


def test_pandas_codec_model_reads_a_dataframe(rest: httpx.Client) -> None:
    columns = (
        {"name": "a", "datatype": "INT64", "shape": [3], "data": [1, 2, 3]},
        {"name": "b", "datatype": "FP64", "shape": [3, 1], "data": [0.5, 0.25, 0.0]},
        {"name": "name", "datatype": "BYTES", "shape": [3], "data": ["x", "y", "z"]},
    )
    answer = infer(rest, "pandas-model", *columns)  # content type pd from model-settings.json
    assert answer["parameters"] == {"content_type": "np"}
    assert answer["outputs"][0]["data"] == [1.5, 2.25, 3.0]
    assert answer["outputs"][0]["shape"] == [3, 1]


def test_registered_input_codec_decodes_its_content_type(
    rest: httpx.Client, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    rows = {
        "name": "rows",
        "datatype": "BYTES",
        "shape": [2],
        "data": ["1,2", "3,4.5"],
        "parameters": {"content_type": "csv"},
    }
    sums, doubled = infer(rest, "codec-model", rows)["outputs"]
    assert sums["data"] == [3.0, 7.5] and sums["datatype"] == "FP64"
    assert doubled["data"] == ["2.0,4.0", "6.0,9.0"]
    assert doubled["parameters"] == {"content_type": "csv"}
    grpc_rows = triton_grpc.InferInput("rows", [1], "BYTES")
    grpc_rows.set_data_from_numpy(np.array([b"1,1,1"], dtype=object))
    # tritonclient 2.41 has no InferInput.set_parameter: tag the message directly.
    grpc_rows._get_tensor().parameters["content_type"].string_param = "csv"
    assert grpc_client.infer("codec-model", [grpc_rows]).as_numpy("sums").tolist() == [[3.0]]


def test_a_codec_makes_the_declared_input_from_the_one_sent(
    rest: httpx.Client, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    """The model declares ``rows`` (FP64); the request sends ``line`` (BYTES) that its
    codec decodes into them. MLServer reads declared inputs as metadata and codec
    hints, so the input reaches the runtime (it was refused: 'line' is not an input)."""
    line = {
        "name": "line",
        "datatype": "BYTES",
        "shape": [1],
        "data": ["1,2\n3,4.5"],
        "parameters": {"content_type": "csv-lines"},
    }
    (sums,) = infer(rest, "csv-codec", line)["outputs"]
    assert sums["data"] == [3.0, 7.5] and sums["shape"] == [2, 1]
    grpc_line = triton_grpc.InferInput("line", [1], "BYTES")
    grpc_line.set_data_from_numpy(np.array([b"1,1,1"], dtype=object))
    grpc_line._get_tensor().parameters["content_type"].string_param = "csv-lines"
    assert grpc_client.infer("csv-codec", [grpc_line]).as_numpy("sums").tolist() == [[3.0]]


def test_predict_stream_over_server_sent_events(rest: httpx.Client) -> None:
    text = {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["one two three"]}
    with rest.stream("POST", "/v2/models/stream-model/infer_stream", json={"inputs": [text]}) as r:
        assert r.status_code == 200
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
    assert [event["outputs"][0]["data"] for event in events] == [["one"], ["two"], ["three"]]


def test_generate_stream_takes_mlservers_v2_body(rest: httpx.Client) -> None:
    # MLServer 1.7 serves generate_stream as infer_stream: a V2 request, V2 events.
    text = {"name": "text", "datatype": "BYTES", "shape": [1], "data": ["one two"]}
    body = {"id": "g-1", "inputs": [text]}
    with rest.stream("POST", "/v2/models/stream-model/generate_stream", json=body) as r:
        assert r.status_code == 200, r.read()
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    assert [(e["model_name"], e["id"]) for e in events] == [("stream-model", "g-1")] * 2
    assert [e["outputs"][0]["data"] for e in events] == [["one"], ["two"]]


def test_predict_stream_over_grpc(server: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        text = triton_grpc.InferInput("text", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"a b"], dtype=object))
        client.async_stream_infer("stream-model", [text])
        received = [answers.get(timeout=TIMEOUT) for _ in range(2)]
        client.stop_stream()
    assert [error for _, error in received] == [None, None]
    assert [result.as_numpy("word").tolist() for result, _ in received] == [[[b"a"]], [[b"b"]]]


def test_custom_handlers_are_served_on_the_rest_port(rest: httpx.Client) -> None:
    one = {"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}
    infer(rest, "handler-model", one)
    stats = rest.get("/handler-model/stats")
    assert stats.status_code == 200 and stats.headers["content-type"] == "application/json"
    assert stats.json()["name"] == "handler-model" and stats.json()["calls"] >= 1
    echo = rest.post("/handler-model/echo", json={"a": [1, 2]})
    assert echo.status_code == 200 and echo.json()["received"] == {"a": [1, 2]}
    assert rest.get("/handler-model/echo").status_code == 404  # declared for POST only
    assert rest.get("/no-such-route").status_code == 404


def test_request_headers_reach_the_model_and_its_headers_come_back(
    rest: httpx.Client, grpc_client: triton_grpc.InferenceServerClient
) -> None:
    one = {"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}
    response = rest.post(
        "/v2/models/handler-model/infer", json={"inputs": [one]}, headers={"X-Tag": "blue"}
    )
    assert response.status_code == 200 and response.headers["x-echo-tag"] == "blue"
    assert "headers" not in response.json()["parameters"]
    flat = rest.post("/v2/models/handler-model/generate", json={"x": 1}, headers={"X-Tag": "red"})
    assert flat.status_code == 200 and flat.headers["x-echo-tag"] == "red"
    x = triton_grpc.InferInput("x", [1], "INT32")
    x.set_data_from_numpy(np.array([1], dtype=np.int32))
    result = grpc_client.infer("handler-model", [x], headers={"x-tag": "green"})
    assert "headers" not in result.get_response().parameters


def test_custom_metrics_are_exported_with_the_model_labels(
    rest: httpx.Client, server: ServerProcess
) -> None:
    x = {"name": "x", "datatype": "FP32", "shape": [3, 1], "data": [1, 2, 3]}
    infer(rest, "numpy-model", x)
    samples = scrape(server.metrics_port)
    labels = {"model_name": "numpy-model", "model_version": "v1"}
    assert value(samples, "numpy_rows_count", **labels) >= 1
    assert value(samples, "numpy_rows_sum", **labels) >= 3


def test_the_readme_example_answers(rest: httpx.Client) -> None:
    text = {"name": "text", "datatype": "BYTES", "shape": [2], "data": ["A fast model", "no"]}
    assert infer(rest, "mlserver-keywords", text)["outputs"][0]["data"] == [2, 0]
    assert rest.get("/keywords").json() == {"keywords": ["fast", "model", "server"]}
    empty = rest.post(
        "/v2/models/mlserver-keywords/infer", json={"inputs": [{**text, "shape": [0], "data": []}]}
    )
    assert empty.status_code == 400 and empty.json() == {"error": "send at least one text"}


def test_model_metadata_comes_from_the_mlmodel(rest: httpx.Client) -> None:
    response = rest.get("/v2/models/pandas-model")
    assert response.status_code == 200
    assert response.json()["name"] == "pandas-model"
    assert response.json()["parameters"] == {"content_type": "pd"}
