"""The statistics extension (Triton's): REST endpoints, the gRPC RPC, tritonclient."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from .across_processes import BOTH_WAYS
from .metrics_helpers import parse, value


def x_input(rows: int) -> dict[str, Any]:
    return {"name": "x", "shape": [rows], "datatype": "FP32", "data": [1.0] * rows}


@pytest.fixture(scope="module", params=BOTH_WAYS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server that has answered a known mix of requests before any test looks;
    with two protocol processes too, whose statistics read as their sum."""
    repository = tmp_path_factory.mktemp("stats")
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "fails", "FailsToPredict")
    add_custom_model(repository, "double/v1", "AsyncDouble", parameters={"version": "1"})
    add_custom_model(repository, "double/v2", "AsyncDouble", parameters={"version": "2"})
    process = start_server(repository, request.param)
    try:
        run_known_mix(process)
        yield process
    finally:
        process.stop()


def run_known_mix(server: ServerProcess) -> None:
    """echo: 3 successes of 2, 2 and 4 rows; fails: 2 failures; double v1: 1 success
    (REST); double v2: 2 successes (gRPC, no version given)."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for rows in (2, 2, 4):
            assert client.post("/v2/models/echo/infer", json={"inputs": [x_input(rows)]}).is_success
        for _ in range(2):
            response = client.post("/v2/models/fails/infer", json={"inputs": [x_input(1)]})
            assert response.status_code == 500
        response = client.post("/v2/models/double/versions/1/infer", json={"inputs": [x_input(3)]})
        assert response.is_success
    with triton_grpc.InferenceServerClient(server.grpc_address) as client:
        for _ in range(2):
            tensor = triton_grpc.InferInput("x", [1], "FP32")
            tensor.set_data_from_numpy(np.ones(1, np.float32))
            client.infer("double", [tensor])


def by_version(model_stats: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(entry["name"], entry["version"]): entry for entry in model_stats}


def counts(entry: dict[str, Any]) -> dict[str, int]:
    inference = entry["inference_stats"]
    return {key: int(inference[key]["count"]) for key in ("success", "fail", "queue")} | {
        "compute_infer": int(inference["compute_infer"]["count"]),
        "inference_count": int(entry["inference_count"]),
        "execution_count": int(entry["execution_count"]),
    }


def expected_counts(successes: int, failures: int, rows: int) -> dict[str, int]:
    """Queue and compute count successful requests; executions (one request each here,
    no batching) and their rows count every request the model ran."""
    return {
        "success": successes,
        "fail": failures,
        "queue": successes,
        "compute_infer": successes,
        "inference_count": rows,
        "execution_count": successes + failures,
    }


EXPECTED = {
    ("echo", ""): expected_counts(3, 0, 8),
    ("fails", ""): expected_counts(0, 2, 2),
    ("double", "1"): expected_counts(1, 0, 3),
    ("double", "2"): expected_counts(2, 0, 2),
}


def test_all_models_stats_match_the_requests_made(served: ServerProcess) -> None:
    response = httpx.get(served.url + "/v2/models/stats")
    assert response.status_code == 200
    entries = by_version(response.json()["model_stats"])
    assert {key: counts(entry) for key, entry in entries.items()} == EXPECTED
    echo = entries[("echo", "")]
    inference = echo["inference_stats"]
    assert inference["success"]["ns"] >= inference["compute_infer"]["ns"] > 0
    assert entries[("fails", "")]["inference_stats"]["fail"]["ns"] > 0
    assert abs(echo["last_inference"] / 1000 - time.time()) < 120
    batches = {b["batch_size"]: b["compute_infer"]["count"] for b in echo["batch_stats"]}
    assert batches == {2: 2, 4: 1}


def test_one_model_gives_all_its_versions_and_one_version_just_that(
    served: ServerProcess,
) -> None:
    both = httpx.get(served.url + "/v2/models/double/stats").json()["model_stats"]
    assert [(entry["name"], entry["version"]) for entry in both] == [
        ("double", "1"),
        ("double", "2"),
    ]
    one = httpx.get(served.url + "/v2/models/double/versions/2/stats").json()["model_stats"]
    assert [counts(entry) for entry in one] == [EXPECTED[("double", "2")]]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v2/models/nosuchmodel/stats", "Request for unknown model: 'nosuchmodel' is not found"),
        (
            "/v2/models/double/versions/9/stats",
            "Request for unknown model: 'double' version 9 is not found",
        ),
    ],
)
def test_unknown_model_or_version_is_404(served: ServerProcess, path: str, message: str) -> None:
    response = httpx.get(served.url + path)
    assert (response.status_code, response.json()) == (404, {"error": message})


def test_tritonclient_http_reads_the_same_statistics(served: ServerProcess) -> None:
    client = triton_http.InferenceServerClient(f"127.0.0.1:{served.http_port}")
    try:
        everything = client.get_inference_statistics()
        echo = client.get_inference_statistics("echo")
        version = client.get_inference_statistics("double", "1")
        with pytest.raises(InferenceServerException, match="nosuchmodel"):
            client.get_inference_statistics("nosuchmodel")
    finally:
        client.close()
    assert {k: counts(e) for k, e in by_version(everything["model_stats"]).items()} == EXPECTED
    assert [counts(entry) for entry in echo["model_stats"]] == [EXPECTED[("echo", "")]]
    assert [counts(entry) for entry in version["model_stats"]] == [EXPECTED[("double", "1")]]


def test_tritonclient_grpc_reads_the_same_statistics(served: ServerProcess) -> None:
    with triton_grpc.InferenceServerClient(served.grpc_address) as client:
        everything = client.get_inference_statistics(as_json=True)
        double = client.get_inference_statistics("double", as_json=True)
        with pytest.raises(InferenceServerException, match="nosuchmodel"):
            client.get_inference_statistics("nosuchmodel")
    # JSON from protobuf omits zeros and empty strings, and writes 64-bit integers as strings.
    entries = by_version([_filled(entry) for entry in everything["model_stats"]])
    assert {key: counts(entry) for key, entry in entries.items()} == EXPECTED
    assert [e["version"] for e in double["model_stats"]] == ["1", "2"]


def _filled(entry: dict[str, Any]) -> dict[str, Any]:
    """A protobuf-JSON ModelStatistics with the zero fields it leaves out put back."""
    message = json_format.ParseDict(entry, pb.ModelStatistics())
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def test_grpc_statistics_rpc_answers_not_found_for_unknown_models(served: ServerProcess) -> None:
    with grpc.insecure_channel(served.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ModelStatistics(pb.ModelStatisticsRequest(name="double", version="9"))
        answer = stub.ModelStatistics(pb.ModelStatisticsRequest(name="fails"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    [fails] = answer.model_stats
    assert (fails.name, fails.inference_stats.fail.count) == ("fails", 2)


def test_statistics_keep_counting_across_a_reload(served: ServerProcess) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as client:
        assert client.post("/v2/repository/models/echo/load").status_code == 200
        entry = client.get("/v2/models/echo/stats").json()["model_stats"][0]
    assert counts(entry) == EXPECTED[("echo", "")]


def test_merged_batches_count_as_one_execution(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    """One request holds the only slot while three more queue; they run as one batch."""
    folder = add_custom_model(
        tmp_path, "merged", "BatchRecorder", max_batch_size=16, max_batch_time=1.0
    )
    server = start(tmp_path)
    metrics_url = f"http://127.0.0.1:{server.metrics_port}/metrics"

    def post(rows: int, **parameters: Any) -> int:
        body = {"inputs": [x_input(rows) | {"shape": [rows, 1]}], "parameters": parameters}
        return httpx.post(f"{server.url}/v2/models/merged/infer", json=body, timeout=30).status_code

    def queued() -> float:
        samples = parse(httpx.get(metrics_url).text)
        return value(samples, "batch_request_queue", model_name="merged", model_version="")

    with ThreadPoolExecutor(4) as threads:
        holder = threads.submit(post, 1, hold=True)
        wait_for(lambda: (folder / "holding").exists(), "the holding request to run")
        queued_up = [threads.submit(post, 2) for _ in range(3)]
        wait_for(lambda: queued() == 3, "three requests to queue behind it")
        (folder / "open").touch()
        assert [f.result() for f in (holder, *queued_up)] == [200] * 4
    entry = httpx.get(f"{server.url}/v2/models/merged/stats").json()["model_stats"][0]
    assert counts(entry) == {
        "success": 4,
        "fail": 0,
        "queue": 4,
        "compute_infer": 4,
        "inference_count": 7,
        "execution_count": 2,
    }
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in entry["batch_stats"]] == [
        (1, 1),
        (6, 1),
    ]
    samples = parse(httpx.get(metrics_url).text)
    labels = {"model_name": "merged", "model_version": ""}
    assert value(samples, "model_infer_batch_size_count", **labels) == 2
    assert value(samples, "model_infer_batch_size_sum", **labels) == 7
    assert value(samples, "batch_request_queue", **labels) == 0
