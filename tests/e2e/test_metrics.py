"""Prometheus metrics end to end: a known mix of requests, then the exact counts scraped."""

from __future__ import annotations

import os
import re
import signal
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from inferd.protocol import pb, pb_grpc
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from .across_processes import BOTH_WAYS
from .metrics_helpers import (
    Samples,
    add_metrics_model,
    label_values,
    model,
    scrape,
    value,
)

X = {"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}
INFER = "/v2/models/{name}/infer"
VERSIONED_INFER = "/v2/models/{name}/versions/{version}/infer"
INFER_SERVICE = "inference.GRPCInferenceService"


@pytest.fixture(scope="module")
def metrics_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("metrics")
    add_custom_model(repository, "echo", "Echo")
    add_custom_model(repository, "fails", "FailsToPredict")
    add_custom_model(repository, "double/v1", "AsyncDouble", parameters={"version": "1"})
    add_custom_model(repository, "double/v2", "AsyncDouble", parameters={"version": "2"})
    add_metrics_model(repository, "custom")
    return repository


@pytest.fixture(scope="module", params=BOTH_WAYS)
def served(request: pytest.FixtureRequest, metrics_repository: Path) -> Iterator[ServerProcess]:
    """One server (inference in the main process) for the tests of this module, and
    one of two protocol processes (whose metrics_port serves their sum); each test
    looks at what changed between two scrapes."""
    with start_server(metrics_repository, request.param) as process:
        yield process


def post(server: ServerProcess, path: str, body: object) -> int:
    return httpx.post(server.url + path, json=body, timeout=30).status_code


def grpc_infer(client: triton_grpc.InferenceServerClient, name: str, version: str = "") -> bool:
    tensor = triton_grpc.InferInput("x", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
    try:
        client.infer(name, [tensor], model_version=version)
    except InferenceServerException:
        return False
    return True


def changes(before: Samples, after: Samples) -> Callable[..., float]:
    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    return delta


def test_exact_counts_after_a_known_mix_over_rest_and_grpc(served: ServerProcess) -> None:
    before = scrape(served.metrics_port)
    rest_statuses = [post(served, "/v2/models/echo/infer", {"inputs": [X]}) for _ in range(3)]
    rest_statuses += [post(served, "/v2/models/fails/infer", {"inputs": [X]}) for _ in range(2)]
    rest_statuses.append(post(served, "/v2/models/double/versions/1/infer", {"inputs": [X]}))
    rest_statuses.append(post(served, "/v2/models/double/infer", {"inputs": [X]}))  # version 2
    rest_statuses.append(post(served, "/v2/models/nosuchmodel/infer", {"inputs": [X]}))
    rest_statuses.append(post(served, "/v2/models/echo/infer", {"inputs": "not a list"}))
    assert rest_statuses == [200, 200, 200, 500, 500, 200, 200, 404, 400]
    with triton_grpc.InferenceServerClient(served.grpc_address) as client:
        grpc_results = [grpc_infer(client, "echo") for _ in range(2)]
        grpc_results += [grpc_infer(client, "fails"), grpc_infer(client, "double", "1")]
        grpc_results.append(grpc_infer(client, "nosuchmodel"))
    assert grpc_results == [True, True, False, True, False]
    after = scrape(served.metrics_port)
    delta = changes(before, after)

    expected = {
        ("echo", ""): (5, 0),
        ("fails", ""): (0, 3),
        ("double", "1"): (2, 0),
        ("double", "2"): (1, 0),
    }
    for (name, version), (successes, failures) in expected.items():
        labels = model(name, version)
        assert delta("model_infer_request_success_total", **labels) == successes, labels
        assert delta("model_infer_request_failure_total", **labels) == failures, labels
        requests = successes + failures
        assert delta("model_infer_request_duration_count", **labels) == requests
        assert delta("model_infer_batch_size_count", **labels) == requests  # no batching
    # Unknown models and undecodable requests never reach a model: no model label for them.
    assert "nosuchmodel" not in label_values(after, "model_name")
    assert label_values(after, "model_name") >= {"echo", "fails", "double", "custom"}

    rest = {"method": "POST", "path": INFER}
    assert delta("rest_server_requests_total", status_code="200", **rest) == 4
    assert delta("rest_server_requests_total", status_code="500", **rest) == 2
    assert delta("rest_server_requests_total", status_code="404", **rest) == 1
    assert delta("rest_server_requests_total", status_code="400", **rest) == 1
    versioned = {"method": "POST", "path": VERSIONED_INFER, "status_code": "200"}
    assert delta("rest_server_requests_total", **versioned) == 1
    assert delta("rest_server_requests_duration_seconds_count", **versioned) == 1
    assert value(after, "rest_server_requests_in_progress", method="POST") == 0

    infer = {"grpc_type": "unary", "grpc_service": INFER_SERVICE, "grpc_method": "ModelInfer"}
    assert delta("grpc_server_started_total", **infer) == 5
    assert delta("grpc_server_handled_total", grpc_code="OK", **infer) == 3
    assert delta("grpc_server_handled_total", grpc_code="INTERNAL", **infer) == 1
    assert delta("grpc_server_handled_total", grpc_code="NOT_FOUND", **infer) == 1
    assert delta("grpc_server_handling_seconds_count", **infer) == 5


def test_rest_paths_are_labelled_by_route_template(served: ServerProcess) -> None:
    httpx.get(served.url + "/v2/models/echo")
    httpx.get(served.url + "/v2/models/double/versions/1/ready")
    httpx.get(served.url + "/v2/no/such/route/for/echo")
    httpx.post(served.url + "/v2/repository/index", json={})
    samples = scrape(served.metrics_port)
    paths = label_values(samples, "path")
    assert {
        "/v2/models/{name}",
        "/v2/models/{name}/versions/{version}/ready",
        "/v2/repository/index",
        "<unmatched>",
    } <= paths
    assert not [path for path in paths if "echo" in path or "double" in path]
    unmatched = {"method": "GET", "path": "<unmatched>", "status_code": "404"}
    assert value(samples, "rest_server_requests_total", **unmatched) >= 1


def test_loaded_models_and_their_load_time(served: ServerProcess) -> None:
    samples = scrape(served.metrics_port)
    assert value(samples, "loaded_models") == 5
    for name, version in [("echo", ""), ("double", "1"), ("double", "2"), ("custom", "")]:
        assert value(samples, "model_load_duration_seconds", **model(name, version)) > 0


# One process only: its gauge `last_rows` says the last request's rows, which two
# protocol processes' summed exposition cannot (each reports its own last request;
# docs/design.md "What is per process"). Pinned, so INFERD_TEST_PROTOCOL_PROCESSES
# does not turn the default server into several processes.
@pytest.mark.parametrize("served", [{"protocol_processes": 1}], ids=["one"], indirect=True)
def test_custom_metrics_logged_in_the_main_process(served: ServerProcess) -> None:
    before = scrape(served.metrics_port)
    for rows in ([1.0, 2.0], [3.0, 4.0, 5.0]):
        x = {"name": "x", "shape": [len(rows)], "datatype": "FP32", "data": rows}
        assert post(served, "/v2/models/custom/infer", {"inputs": [x]}) == 200
    after = scrape(served.metrics_port)
    delta = changes(before, after)
    labels = model("custom")
    assert delta("rows_seen_total", **labels) == 5
    assert value(after, "last_rows", **labels) == 3
    assert delta("input_total_count", **labels) == 2
    assert delta("input_total_sum", **labels) == 15
    assert delta("input_total_bucket", le="10.0", **labels) == 1  # 3; 12 is above 10
    assert delta("unregistered_count", **labels) == 2


def test_only_the_metrics_endpoint_is_served(served: ServerProcess) -> None:
    response = httpx.get(f"http://127.0.0.1:{served.metrics_port}/other")
    assert response.status_code == 404
    assert "/metrics" in response.text


def test_endpoint_and_rest_prefix_follow_the_settings(
    metrics_repository: Path, start: Callable[..., ServerProcess]
) -> None:
    settings = {"metrics_endpoint": "/prom", "metrics_rest_server_prefix": "http"}
    server = start(metrics_repository, settings=settings)
    assert post(server, "/v2/models/echo/infer", {"inputs": [X]}) == 200
    samples = scrape(server.metrics_port, "/prom")
    labels = {"method": "POST", "path": INFER, "status_code": "200"}
    assert value(samples, "http_requests_total", **labels) == 1
    assert not [name for name, _ in samples if name.startswith("rest_server_")]
    assert httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").status_code == 404


@pytest.mark.parametrize("endpoint", ["", None])
def test_an_empty_endpoint_turns_metrics_off(
    metrics_repository: Path, start: Callable[..., ServerProcess], endpoint: str | None
) -> None:
    server = start(metrics_repository, settings={"metrics_endpoint": endpoint})
    assert post(server, "/v2/models/custom/infer", {"inputs": [X]}) == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics")
    # The statistics extension does not depend on metrics.
    stats = httpx.get(server.url + "/v2/models/custom/stats").json()
    assert stats["model_stats"][0]["inference_stats"]["success"]["count"] == 1


# ---- worker processes ----------------------------------------------------------


@pytest.fixture(scope="module")
def worker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One worker process running the custom-metrics model, one request at a time."""
    repository = tmp_path_factory.mktemp("worker-metrics")
    add_metrics_model(repository, "custom")
    with start_server(repository, settings={"parallel_workers": 1}) as process:
        yield process


def slow_request(server: ServerProcess, seconds: float) -> int:
    body = {"inputs": [X], "parameters": {"sleep": seconds}}
    return post(server, "/v2/models/custom/infer", body)


def test_queue_batch_and_worker_metrics_move_under_load(worker_server: ServerProcess) -> None:
    labels = model("custom")
    port = worker_server.metrics_port

    def busy_and_queued() -> bool:
        samples = scrape(port)
        return (
            value(samples, "parallel_request_queue", **labels) == 1  # one worker slot
            and value(samples, "batch_request_queue", **labels) >= 1
            and value(samples, "rest_server_requests_in_progress", method="POST") >= 2
        )

    before = scrape(port)
    with ThreadPoolExecutor(4) as pool:
        statuses = [pool.submit(slow_request, worker_server, 0.3) for _ in range(4)]
        wait_for(busy_and_queued, "requests to queue up behind the busy worker")
        assert [status.result() for status in statuses] == [200] * 4
    after = scrape(port)
    delta = changes(before, after)
    assert delta("model_infer_request_success_total", **labels) == 4
    assert value(after, "batch_request_queue", **labels) == 0
    assert value(after, "parallel_request_queue", **labels) == 0
    assert value(after, "rest_server_requests_in_progress", method="POST") == 0
    # Requests that found the worker busy waited for it.
    assert delta("model_infer_queue_duration_seconds_count", **labels) == 4
    assert delta("model_infer_queue_duration_seconds_sum", **labels) > 0.25
    executions = delta("model_infer_batch_size_count", **labels)
    assert (executions, delta("model_infer_batch_size_sum", **labels)) == (4, 8)
    assert delta("worker_busy_seconds_total", worker="0") >= 1.1
    # Custom metrics logged inside the worker process, labelled with the model.
    assert delta("rows_seen_total", **labels) == 8
    assert value(after, "last_rows", **labels) == 2
    assert delta("unregistered_count", **labels) == 4


def test_a_worker_restart_is_counted_and_logged(worker_server: ServerProcess) -> None:
    before = scrape(worker_server.metrics_port)
    answer = httpx.post(
        worker_server.url + "/v2/models/custom/infer", json={"inputs": [X]}, timeout=30
    ).json()
    os.kill(int(answer["outputs"][0]["data"][0]), signal.SIGKILL)
    wait_for(
        lambda: (
            value(scrape(worker_server.metrics_port), "worker_restarts_total", worker="0")
            > value(before, "worker_restarts_total", worker="0")
        ),
        "the restart to be counted",
    )
    wait_for(
        lambda: post(worker_server, "/v2/models/custom/infer", {"inputs": [X]}) == 200,
        "the restarted worker to serve",
    )
    delta = changes(before, scrape(worker_server.metrics_port))
    assert delta("worker_restarts_total", worker="0") == 1
    assert delta("rows_seen_total", **model("custom")) >= 4  # the new process logs on
    # With protocol processes the model host's lines carry its tag ("[model host 3] ").
    restarted = r"INFO (\[model host \d+\] )?\[inferd\.workers\.pool\] Restarted worker 0 \(pid"
    assert re.search(restarted, worker_server.log())


def test_a_metrics_port_in_use_is_a_clear_error(
    metrics_repository: Path, start: Callable[..., ServerProcess]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = start(metrics_repository, settings={"metrics_port": port}, wait=None)
        assert server.process.wait(60) == 1
    assert (
        f"Cannot listen for metrics on 127.0.0.1:{port}: Address already in use; set "
        'metrics_port to a free port, or metrics_endpoint to "" to turn metrics off'
    ) in server.log()
    assert "Traceback" not in server.log()


def test_a_grpc_stream_counts_as_one_call_and_its_requests_as_inferences(
    served: ServerProcess,
) -> None:
    def request(name: str) -> pb.ModelInferRequest:
        message = pb.ModelInferRequest(model_name=name)
        tensor = message.inputs.add(name="x", datatype="FP32", shape=[1])
        tensor.contents.fp32_contents.append(1.0)
        return message

    before = scrape(served.metrics_port)
    with grpc.insecure_channel(served.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        answers = list(stub.ModelStreamInfer(iter([request("echo"), request("fails")])))
    assert [bool(answer.error_message) for answer in answers] == [False, True]
    delta = changes(before, scrape(served.metrics_port))
    stream = {"grpc_service": INFER_SERVICE, "grpc_method": "ModelStreamInfer"}
    assert delta("grpc_server_started_total", grpc_type="bidi_stream", **stream) == 1
    assert (
        delta("grpc_server_handled_total", grpc_type="bidi_stream", grpc_code="OK", **stream) == 1
    )
    assert delta("model_infer_request_success_total", **model("echo")) == 1
    assert delta("model_infer_request_failure_total", **model("fails")) == 1
