"""What a request may not say: data nested unlike its shape, an output asked for twice.

Both are refused with 400 (gRPC INVALID_ARGUMENT) naming what was wrong, by a real
server, to tritonclient and to plain HTTP clients; data nested as its shape, or flat,
is still served.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

from tests.support.serverproc import ServerProcess

ROW = [5.1, 3.5, 1.4, 0.2]
COPIES = 5000  # as many as a careless (or hostile) client might ask for


def iris_input(shape: list[int], data: Any, datatype: str = "FP64") -> dict[str, Any]:
    return {"name": "input-0", "datatype": datatype, "shape": shape, "data": data}


@pytest.fixture(scope="module")
def triton_grpc(server: ServerProcess) -> Iterator[tritonclient.grpc.InferenceServerClient]:
    with tritonclient.grpc.InferenceServerClient(server.grpc_address) as client:
        yield client


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (
            iris_input([1, 4], [[5.1, 3.5], [1.4, 0.2]]),
            "Input 'input-0': shape [1, 4] does not match its nested data, which nests as [2, 2]",
        ),
        (
            iris_input([2, 4], [ROW, ROW[:2], ROW[2:]]),
            "Input 'input-0': data is a ragged nested list",
        ),
        (
            iris_input([1, 4], [["a", "b"], ["c", "d"]], "BYTES"),
            "shape [1, 4] does not match its nested data, which nests as [2, 2]",
        ),
        (
            iris_input([1, 4], [["a", "b", "c"], ["d"]], "BYTES"),
            "shape [1, 4] does not match its nested data, which is ragged",
        ),
    ],
    ids=["nests as 2x2", "ragged", "BYTES nests as 2x2", "BYTES ragged"],
)
def test_nested_data_unlike_its_shape_is_400(
    rest: httpx.Client, tensor: dict[str, Any], message: str
) -> None:
    response = rest.post("/v2/models/iris/infer", json={"inputs": [tensor]})
    assert response.status_code == 400
    assert message in response.json()["error"]


@pytest.mark.parametrize(
    ("shape", "data"),
    [([1, 4], [ROW]), ([1, 4], ROW), ([2, 4], [ROW, ROW]), ([2, 4], ROW + ROW)],
    ids=["nested 1x4", "flat 1x4", "nested 2x4", "flat 2x4"],
)
def test_data_nested_as_its_shape_or_flat_is_served(
    rest: httpx.Client, shape: list[int], data: list[Any]
) -> None:
    response = rest.post("/v2/models/iris/infer", json={"inputs": [iris_input(shape, data)]})
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["shape"] == [shape[0], 1]


# Triton's words, then inferd's.
TWICE = "output 'predict' already requested (it appears more than once)"


def test_an_output_asked_for_twice_is_400_over_rest(
    triton_http: tritonclient.http.InferenceServerClient, rest: httpx.Client
) -> None:
    features = tritonclient.http.InferInput("input-0", [1, 4], "FP64")
    features.set_data_from_numpy(np.array([ROW]))
    outputs = [tritonclient.http.InferRequestedOutput("predict") for _ in range(COPIES)]
    with pytest.raises(InferenceServerException) as refused:
        triton_http.infer("iris", [features], outputs=outputs)
    assert refused.value.status() == "400"
    assert refused.value.message() == TWICE
    # Named once, it is answered once.
    answer = triton_http.infer("iris", [features], outputs=outputs[:1])
    assert answer.get_response()["outputs"][0]["name"] == "predict"
    assert len(answer.get_response()["outputs"]) == 1
    plain = rest.post(
        "/v2/models/iris/infer",
        json={"inputs": [iris_input([1, 4], ROW)], "outputs": [{"name": "predict"}] * 2},
    )
    assert (plain.status_code, plain.json()) == (
        400,
        {"error": TWICE},
    )


def test_an_output_asked_for_twice_is_invalid_argument_over_grpc(
    triton_grpc: tritonclient.grpc.InferenceServerClient,
) -> None:
    features = tritonclient.grpc.InferInput("input-0", [1, 4], "FP64")
    features.set_data_from_numpy(np.array([ROW]))
    outputs = [tritonclient.grpc.InferRequestedOutput("predict") for _ in range(COPIES)]
    with pytest.raises(InferenceServerException) as refused:
        triton_grpc.infer("iris", [features], outputs=outputs)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refused.value.message() == TWICE
    answer = triton_grpc.infer("iris", [features], outputs=outputs[:1])
    assert [output.name for output in answer.get_response().outputs] == ["predict"]
