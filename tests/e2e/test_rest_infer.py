"""POST /v2/models/{m}/infer with JSON bodies: datatypes, shapes, outputs, id, versions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import joblib
import numpy as np
import pytest

# Two rows of each datatype's edge values, as JSON data and as the array they stand for.
DATATYPE_VALUES: dict[str, tuple[list[list[Any]], np.ndarray]] = {
    "BOOL": ([[True, False], [False, True]], np.array([[1, 0], [0, 1]], dtype=bool)),
    "UINT8": ([[0, 255], [1, 2]], np.array([[0, 255], [1, 2]], dtype=np.uint8)),
    "UINT16": ([[0, 65535], [1, 2]], np.array([[0, 65535], [1, 2]], dtype=np.uint16)),
    "UINT32": ([[0, 2**32 - 1], [1, 2]], np.array([[0, 2**32 - 1], [1, 2]], dtype=np.uint32)),
    "UINT64": ([[0, 2**64 - 1], [1, 2]], np.array([[0, 2**64 - 1], [1, 2]], dtype=np.uint64)),
    "INT8": ([[-128, 127], [0, -1]], np.array([[-128, 127], [0, -1]], dtype=np.int8)),
    "INT16": ([[-(2**15), 2**15 - 1], [0, -1]], np.array([[-(2**15), 2**15 - 1], [0, -1]], "<i2")),
    "INT32": ([[-(2**31), 2**31 - 1], [0, -1]], np.array([[-(2**31), 2**31 - 1], [0, -1]], "<i4")),
    "INT64": ([[-(2**63), 2**63 - 1], [0, -1]], np.array([[-(2**63), 2**63 - 1], [0, -1]], "<i8")),
    "FP16": ([[0.5, -1.25], [65504.0, 0]], np.array([[0.5, -1.25], [65504, 0]], np.float16)),
    "FP32": ([[0.5, -1.25], [3.0e38, 1e-3]], np.array([[0.5, -1.25], [3.0e38, 1e-3]], "<f4")),
    "FP64": ([[0.1, -1e300], [1e-300, 2]], np.array([[0.1, -1e300], [1e-300, 2]], "<f8")),
    "BYTES": ([["", "héllo"], ["a b", "{}"]], np.array([["", "héllo"], ["a b", "{}"]], object)),
}


def infer(rest: httpx.Client, model: str, body: dict[str, Any], version: str = "") -> Any:
    path = (
        f"/v2/models/{model}/versions/{version}/infer" if version else f"/v2/models/{model}/infer"
    )
    response = rest.post(path, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def tensor(name: str, datatype: str, shape: list[int], data: Any) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def as_array(output: dict[str, Any]) -> np.ndarray:
    if output["datatype"] == "BYTES":
        return np.array(output["data"], dtype=object).reshape(output["shape"])
    return np.array(output["data"]).reshape(output["shape"])


@pytest.mark.parametrize("datatype", list(DATATYPE_VALUES))
@pytest.mark.parametrize("layout", ["nested", "flat"])
def test_every_datatype_round_trips(rest: httpx.Client, datatype: str, layout: str) -> None:
    data, expected = DATATYPE_VALUES[datatype]
    if layout == "flat":
        data = [item for row in data for item in row]
    body = infer(rest, "echo", {"inputs": [tensor("t", datatype, [2, 2], data)]})
    (output,) = body["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("t", datatype, [2, 2])
    assert len(output["data"]) == 4, "outputs are sent flat"
    received = np.array(output["data"], dtype=expected.dtype).reshape(output["shape"])
    np.testing.assert_array_equal(received, expected, strict=True)


def test_all_datatypes_in_one_request(rest: httpx.Client) -> None:
    inputs = [tensor(dt.lower(), dt, [2, 2], data) for dt, (data, _) in DATATYPE_VALUES.items()]
    body = infer(rest, "echo", {"inputs": inputs})
    assert [o["datatype"] for o in body["outputs"]] == list(DATATYPE_VALUES)


def test_flat_data_takes_the_declared_shape(rest: httpx.Client) -> None:
    body = infer(rest, "double", {"inputs": [tensor("x", "INT32", [2, 3], [1, 2, 3, 4, 5, 6])]})
    y = body["outputs"][0]
    assert (y["name"], y["shape"], y["data"]) == ("y", [2, 3], [2, 4, 6, 8, 10, 12])


def test_empty_tensor(rest: httpx.Client) -> None:
    body = infer(rest, "echo", {"inputs": [tensor("e", "FP32", [0, 3], [])]})
    assert body["outputs"] == [{"name": "e", "datatype": "FP32", "shape": [0, 3], "data": []}]


def test_outputs_chooses_which_outputs_and_their_order(rest: httpx.Client) -> None:
    request = {
        "inputs": [tensor("x", "FP32", [1], [1.5])],
        "outputs": [{"name": "version"}, {"name": "y"}],
    }
    body = infer(rest, "double", request)
    assert [o["name"] for o in body["outputs"]] == ["version", "y"]
    assert body["outputs"][1]["data"] == [3.0]


def test_id_is_echoed(rest: httpx.Client) -> None:
    request = {"id": "request-42", "inputs": [tensor("x", "FP32", [1], [1])]}
    assert infer(rest, "double", request)["id"] == "request-42"
    assert "id" not in infer(rest, "double", {"inputs": [tensor("x", "FP32", [1], [1])]})


def test_parameters_reach_the_model(rest: httpx.Client) -> None:
    request = {
        "parameters": {"threshold": 0.5, "mode": "fast", "flags": [1, 2]},
        "inputs": [{**tensor("t", "BYTES", [1], ["a"]), "parameters": {"content_type": "str"}}],
    }
    body = infer(rest, "echo", request)  # Echo returns what it was given
    assert body["parameters"] == {"threshold": 0.5, "mode": "fast", "flags": [1, 2]}
    assert body["outputs"][0]["parameters"] == {"content_type": "str"}


@pytest.mark.parametrize("version", ["1", "2"])
def test_versioned_infer_reaches_that_version(rest: httpx.Client, version: str) -> None:
    body = infer(rest, "double", {"inputs": [tensor("x", "INT64", [1], [21])]}, version)
    assert (body["model_name"], body["model_version"]) == ("double", version)
    outputs = {o["name"]: o["data"] for o in body["outputs"]}
    assert outputs["y"] == [42]
    assert outputs["version"] == [version]


def test_unversioned_infer_goes_to_the_highest_version(rest: httpx.Client) -> None:
    body = infer(rest, "double", {"inputs": [tensor("x", "INT64", [1], [1])]})
    assert body["model_version"] == "2"
    assert {o["name"]: o["data"] for o in body["outputs"]}["version"] == ["2"]


def test_unversioned_model_has_no_model_version(rest: httpx.Client) -> None:
    body = infer(rest, "echo", {"inputs": [tensor("t", "INT8", [1], [1])]})
    assert body["model_name"] == "echo"
    assert body.get("model_version") in (None, "")


def test_sklearn_model_predicts_like_the_trained_model(
    rest: httpx.Client, main_repository: Path, iris_features: np.ndarray
) -> None:
    features = iris_features[::10]
    request = {
        "inputs": [tensor("input-0", "FP64", list(features.shape), features.tolist())],
        "outputs": [{"name": "predict"}],
    }
    body = infer(rest, "iris", request)
    expected = joblib.load(main_repository / "iris" / "model.joblib").predict(features)
    np.testing.assert_array_equal(as_array(body["outputs"][0]).reshape(-1), expected)
