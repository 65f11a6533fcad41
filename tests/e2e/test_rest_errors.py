"""REST errors: {"error": message} with the right status, no tracebacks, and the server goes on."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest

from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess

from .metrics_helpers import scrape, value


def tensor(datatype: str, shape: Any, data: Any, name: str = "t") -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def body(*inputs: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def binary_body(header: dict[str, Any], payload: bytes) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(header).encode()
    return head + payload, {"Inference-Header-Content-Length": str(len(head))}


def sized(datatype: str, shape: list[int], size: int) -> dict[str, Any]:
    parameters = {"binary_data_size": size}
    return {"name": "t", "datatype": datatype, "shape": shape, "parameters": parameters}


def nested_body(data_depth: int = 1, parameter_depth: int = 0) -> bytes:
    """A request whose data, and parameters, nest this deep (built as text: json.dumps
    recurses too)."""
    data = "[" * data_depth + "1" + "]" * data_depth
    parameters = '{"p":' * parameter_depth + "1" + "}" * parameter_depth
    tensor = f'{{"name": "t", "datatype": "FP32", "shape": [1], "data": {data}}}'
    return f'{{"inputs": [{tensor}], "parameters": {{"deep": {parameters}}}}}'.encode()


BAD_REQUESTS: dict[str, tuple[bytes, dict[str, str], str]] = {
    "malformed JSON": (b'{"inputs": [', {}, "Invalid inference request"),
    "empty body": (b"", {}, "The request body is empty"),
    "not an object": (
        b"[1, 2]",
        {},
        "Invalid inference request: the body must be object, got array",
    ),
    "no inputs": (b"{}", {}, "Invalid inference request: the required field $.inputs is missing"),
    "input without datatype": (
        b'{"inputs": [{"name": "t", "shape": [1], "data": [1]}]}',
        {},
        "Invalid inference request: the required field $.inputs[0].datatype is missing",
    ),
    "input without data": (body({"name": "t", "datatype": "FP32", "shape": [1]}), {}, "no data"),
    "wrong shape": (body(tensor("INT32", [3], [1, 2])), {}, "shape [3] needs 3 elements"),
    "ragged data": (body(tensor("INT32", [2, 2], [[1, 2], [3]])), {}, "ragged"),
    "negative dimension": (body(tensor("FP32", [-1], [1.0])), {}, "non-negative integers"),
    "shape not a list": (body(tensor("FP32", "2", [1.0, 2.0])), {}, "$.inputs[0].shape"),
    "unknown datatype": (body(tensor("FP8", [1], [1])), {}, "Unsupported datatype 'FP8'"),
    "text as integers": (body(tensor("INT64", [1], ["1"])), {}, "INT64 data must be integers"),
    "floats as integers": (body(tensor("INT8", [1], [1.5])), {}, "INT8 data must be integers"),
    "out of range": (body(tensor("UINT8", [2], [1, 256])), {}, "out of range for UINT8"),
    "negative unsigned": (body(tensor("UINT32", [1], [-1])), {}, "out of range for UINT32"),
    "beyond 64 bits": (body(tensor("INT64", [1], [2**64])), {}, "out of range for INT64"),
    "null as a number": (body(tensor("FP32", [2], [1.0, None])), {}, "FP32 data must be numbers"),
    "text as BOOL": (body(tensor("BOOL", [1], ["true"])), {}, "BOOL data must be true/false"),
    "numbers as BYTES": (body(tensor("BYTES", [1], [1])), {}, "BYTES data must be strings"),
    "duplicate input": (
        body(tensor("FP32", [1], [1]), tensor("FP32", [1], [1])),
        {},
        "more than once",
    ),
    "id not a string": (body(tensor("FP32", [1], [1]), id=5), {}, "$.id"),
    "unknown output": (
        body(tensor("FP32", [1], [1]), outputs=[{"name": "nope"}]),
        {},
        "no output named 'nope'",
    ),
    "binary_data not a bool": (
        body(tensor("FP32", [1], [1]), outputs=[{"name": "t", "parameters": {"binary_data": 1}}]),
        {},
        "'binary_data' must be true or false",
    ),
    "classification of BYTES": (
        body(
            tensor("BYTES", [1], ["a"]),
            outputs=[{"name": "t", "parameters": {"classification": 2}}],
        ),
        {},
        "unsupported type 'BYTES'",
    ),
    "header length not a number": (body(), {"Inference-Header-Content-Length": "x"}, "integer"),
    "header length past the body": (
        body(),
        {"Inference-Header-Content-Length": "9999"},
        "outside the body",
    ),
    "header length inside the JSON": (
        body(tensor("FP32", [1], [1])),
        {"Inference-Header-Content-Length": "10"},
        "Inference-Header-Content-Length",
    ),
    "binary size without header": (body(sized("FP32", [1], 4)), {}, "no Inference-Header"),
    "binary size too large": (*binary_body({"inputs": [sized("FP32", [2], 8)]}, b"\0" * 4), "past"),
    "binary size not matching shape": (
        *binary_body({"inputs": [sized("FP32", [2], 4)]}, b"\0" * 4),
        "needs 8 bytes, got 4",
    ),
    "binary size negative": (*binary_body({"inputs": [sized("FP32", [1], -4)]}, b"\0" * 4), ">= 0"),
    "unclaimed binary bytes": (
        *binary_body({"inputs": [sized("FP32", [1], 4)]}, b"\0" * 6),
        "2 bytes that no input claims",
    ),
    "BYTES length past the data": (
        *binary_body({"inputs": [sized("BYTES", [1], 5)]}, b"\x09\0\0\0a"),
        "runs past the data",
    ),
    "BYTES elements missing": (
        *binary_body({"inputs": [sized("BYTES", [2], 8)]}, b"\x04\0\0\0abcd"),
        "ends before element 1",
    ),
    "BYTES shape the data cannot hold": (
        # Refused before allocating room for two billion elements.
        *binary_body({"inputs": [sized("BYTES", [2_000_000_000], 4)]}, b"\0" * 4),
        "has 2000000000 BYTES elements, more than 4 bytes of data can hold",
    ),
    "BOOL bytes other than 0 and 1": (
        *binary_body({"inputs": [sized("BOOL", [2], 2)]}, b"\x01\x02"),
        "BOOL bytes must each be 0 or 1",
    ),
    "binary data and data": (
        *binary_body({"inputs": [{**sized("FP32", [1], 4), "data": [1.0]}]}, b"\0" * 4),
        "both data and binary_data_size",
    ),
    "unknown content encoding": (
        body(),
        {"Content-Encoding": "br"},
        "Unsupported Content-Encoding",
    ),
    "not gzip data": (body(), {"Content-Encoding": "gzip"}, "not valid gzip data"),
    # Nesting: past Python's recursion limit, past numpy's 64 dimensions, and in
    # parameters (deep enough to break a recursive walk, or merely too deep to echo).
    "JSON nested too deeply": (nested_body(data_depth=100_000), {}, "nested too deeply"),
    "data past 64 dimensions": (nested_body(data_depth=70), {}, "numpy's 64 dimensions"),
    "parameters nested too deeply": (nested_body(parameter_depth=900), {}, "32 levels deep"),
    "parameters nested past 32": (nested_body(parameter_depth=33), {}, "32 levels deep"),
    # Shapes numpy cannot build.
    "33 dimensions": (body(tensor("INT32", [1] * 33, [1])), {}, "33 dimensions; at most 32"),
    "an empty shape numpy cannot size": (
        body(tensor("INT32", [0, 2**62], [])),
        {},
        "is too large for a tensor",
    ),
    "binary, too many dimensions": (
        *binary_body({"inputs": [sized("INT32", [1] * 40, 4)]}, b"\0" * 4),
        "40 dimensions; at most 32",
    ),
    "not UTF-8": (
        b'{"inputs": [{"name": "\xff", "datatype": "FP32", "shape": [1], "data": [1]}]}',
        {},
        # All of it: inferd's words, not those of the msgspec release pip picked.
        "Invalid inference request: JSON must be UTF-8 text; byte 22 (0xff) is not",
    ),
    "FP32 out of range": (body(tensor("FP32", [2], [1.5, 1e300])), {}, "out of range for FP32"),
    "FP16 out of range": (body(tensor("FP16", [1], [70000])), {}, "out of range for FP16"),
}


def assert_error(response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()
    assert list(error) == ["error"]
    assert fragment in error["error"]
    assert "Traceback" not in response.text


def assert_still_serving(rest: httpx.Client) -> None:
    ok = rest.post("/v2/models/echo/infer", content=body(tensor("INT8", [1], [3])))
    assert ok.status_code == 200
    assert ok.json()["outputs"][0]["data"] == [3]


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_are_400(rest: httpx.Client, case: str) -> None:
    content, headers, fragment = BAD_REQUESTS[case]
    response = rest.post("/v2/models/echo/infer", content=content, headers=headers)
    assert_error(response, 400, fragment)
    assert_still_serving(rest)


def test_bad_repository_index_body_is_400(rest: httpx.Client) -> None:
    assert_error(rest.post("/v2/repository/index", content=b"{nope"), 400, "Invalid repository")
    assert_error(rest.post("/v2/repository/index", json={"ready": "yes"}), 400, "$.ready")


@pytest.mark.parametrize(
    "method, path, message",
    [
        ("POST", "/v2/models/nope/infer", "Request for unknown model: 'nope' is not found"),
        (
            "POST",
            "/v2/models/double/versions/9/infer",
            "Request for unknown model: 'double' version 9 is not found",
        ),
        ("GET", "/v2/models/nope", "Request for unknown model: 'nope' is not found"),
        ("GET", "/v2/nowhere", "No route for GET /v2/nowhere"),
        ("GET", "/", "No route for GET /"),
        (
            "POST",
            "/v2/models/echo/versions/1/infer",
            "Request for unknown model: 'echo' version 1 is not found",
        ),
    ],
)
def test_unknown_things_are_404(rest: httpx.Client, method: str, path: str, message: str) -> None:
    response = rest.request(method, path, content=body(tensor("FP32", [1], [1])))
    assert_error(response, 404, message)


def test_wrong_method_is_405(rest: httpx.Client) -> None:
    assert_error(rest.get("/v2/models/echo/infer"), 405, "GET is not allowed")


def test_failure_inside_the_model_is_500_with_its_message(rest: httpx.Client) -> None:
    response = rest.post("/v2/models/fails/infer", content=body(tensor("FP32", [1], [1])))
    assert_error(response, 500, "ValueError: this model always fails")
    assert_still_serving(rest)


def test_model_raising_on_bad_input_is_500_with_its_message(rest: httpx.Client) -> None:
    response = rest.post("/v2/models/double/infer", content=body(tensor("FP32", [1], [1], "z")))
    assert_error(response, 500, "KeyError: 'x'")
    assert_still_serving(rest)


def test_parameters_nested_within_the_limit_are_served(rest: httpx.Client) -> None:
    response = rest.post("/v2/models/echo/infer", content=nested_body(parameter_depth=32))
    assert response.status_code == 200, response.text


def test_a_client_leaving_mid_body_on_a_starlette_route_is_499_not_an_error(
    server: ServerProcess,
) -> None:
    """Starlette's ClientDisconnect (not the fast path's) must not read as a server fault."""
    labels = {"method": "POST", "path": "/v2/repository/index", "status_code": "499"}
    before = value(scrape(server.metrics_port), "rest_server_requests_total", **labels)
    with socket.create_connection(("127.0.0.1", server.http_port)) as client:
        head = "POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        client.sendall(head.encode() + b'{"ready":')  # then leave, 91 bytes short
    wait_for(
        lambda: value(scrape(server.metrics_port), "rest_server_requests_total", **labels) > before,
        "the disconnect to be counted as 499",
    )
    assert "ClientDisconnect" not in server.log()
