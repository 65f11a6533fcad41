"""Models loaded on their first request, at most ``max_loaded_models`` at once
(serving/on_demand.py), with one protocol process and with three."""

from __future__ import annotations

import json
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

MODELS = [f"m{index}" for index in range(12)]
SEQUENTIAL = [f"s{index}" for index in range(5)]
BUDGET = 3
INPUT = {"name": "x", "datatype": "INT32", "shape": [1], "data": [7]}
PROCESSES = [
    pytest.param({"protocol_processes": 1}, id="1-process"),
    pytest.param({"protocol_processes": 3}, id="3-processes"),
]


def add_artifact(repository: Path, name: str, **extra: Any) -> None:
    """A model answering the text of its own file: an answer says which model ran."""
    folder = add_custom_model(
        repository,
        name,
        "ServesArtifact",
        parameters={"uri": "./text.txt", "extra": extra},
    )
    (folder / "text.txt").write_text(f"I am {name}")


@pytest.fixture(scope="module", params=PROCESSES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("on-request")
    for name in MODELS:
        add_artifact(repository, name)
    add_artifact(repository, "pinned")
    add_artifact(repository, "slow", load_seconds=1.5)
    add_custom_model(repository, "broken", "FailsToLoad")
    add_artifact(repository, "by-grpc")
    for name in SEQUENTIAL:
        add_artifact(repository, name)
    add_custom_model(repository, "tokens", "Tokens")
    add_custom_model(repository, "grpc-tokens", "Tokens")
    for version in ("1", "2"):  # AsyncDouble answers its version
        add_custom_model(
            repository,
            f"split/{version}",
            "AsyncDouble",
            parameters={"version": version},
            version_weights={"1": 90, "2": 10},
            version_sticky_header="x-user",
        )
    settings = {"load_on_request": True, "max_loaded_models": BUDGET, **request.param}
    with start_server(repository, settings) as process:
        yield process


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as http:
        yield http


def text_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    return str(output["data"][0])


def infer(
    client: httpx.Client, name: str, headers: dict[str, str] | None = None, **parameters: Any
) -> httpx.Response:
    body: dict[str, Any] = {"inputs": [INPUT]}
    if parameters:
        body["parameters"] = parameters
    return client.post(f"/v2/models/{name}/infer", json=body, headers=headers)


def ready_models(client: httpx.Client) -> set[str]:
    # A new connection each time: with several processes, any of them answers.
    response = client.post(
        "/v2/repository/index", json={"ready": True}, headers={"connection": "close"}
    )
    assert response.status_code == 200, response.text
    return {entry["name"] for entry in response.json()}


def test_not_loaded_until_asked_and_ready_does_not_load(client: httpx.Client) -> None:
    assert client.get("/v2/models/m0/ready").status_code != 200
    index = {entry["name"]: entry for entry in client.post("/v2/repository/index").json()}
    assert index["m0"]["state"] == "UNAVAILABLE"
    assert "m0" not in ready_models(client)
    assert text_of(infer(client, "m0")) == "I am m0"


def test_every_process_evicts_the_same_models(server: ServerProcess) -> None:
    """Each request on a new connection (any process takes it); one at a time, so
    the model each load names for eviction is idle everywhere."""
    for name in SEQUENTIAL:
        with httpx.Client(base_url=server.url, timeout=60) as fresh:
            assert text_of(infer(fresh, name)) == f"I am {name}"
    with httpx.Client(base_url=server.url, timeout=60) as fresh:
        seen = {frozenset(ready_models(fresh)) for _ in range(15)}
    assert len(seen) == 1, seen
    (loaded,) = seen
    assert len(loaded - {"pinned"}) <= BUDGET
    assert SEQUENTIAL[-1] in loaded


def test_a_grpc_request_and_a_stream_load_their_model(server: ServerProcess) -> None:
    with triton.InferenceServerClient(server.grpc_address) as grpc_client:
        assert not grpc_client.is_model_ready("by-grpc")
        tensor = triton.InferInput("x", [1], "INT32")
        tensor.set_data_from_numpy(np.array([7], dtype=np.int32))
        result = grpc_client.infer("by-grpc", [tensor])
        assert result.as_numpy("text").tolist() == [b"I am by-grpc"]
    body = {"id": "s", "inputs": [INPUT], "parameters": {"count": 3}}
    url = f"{server.url}/v2/models/tokens/infer_stream"
    with httpx.stream("POST", url, json=body, timeout=60) as sse:
        assert sse.status_code == 200
        data = [line for line in sse.iter_lines() if line.startswith("data: ")]
    assert len(data) == 3


def test_a_grpc_stream_loads_a_model_that_only_streams(server: ServerProcess) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with triton.InferenceServerClient(server.grpc_address) as grpc_client:
        grpc_client.start_stream(callback=lambda result, error: answers.put((result, error)))
        tensor = triton.InferInput("x", [1], "INT32")
        tensor.set_data_from_numpy(np.array([7], dtype=np.int32))
        grpc_client.async_stream_infer("grpc-tokens", [tensor], parameters={"count": 3})
        got = [answers.get(timeout=60) for _ in range(3)]
        grpc_client.stop_stream()
    assert [error for _, error in got] == [None] * 3
    assert [int(result.as_numpy("index")[0]) for result, _ in got] == [0, 1, 2]


def test_unversioned_requests_split_by_weight_and_stick_by_header(client: httpx.Client) -> None:
    landed = Counter(version_of(infer(client, "split")) for _ in range(300))
    assert set(landed) == {"1", "2"}
    assert 0.8 <= landed["1"] / 300 <= 0.97, landed
    for user in ("alice", "bob", "carol"):
        seen = {version_of(infer(client, "split", headers={"x-user": user})) for _ in range(10)}
        assert len(seen) == 1, (user, seen)
    assert (
        version_of(client.post("/v2/models/split/versions/2/infer", json={"inputs": [INPUT]}))
        == "2"
    )


def version_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    (version,) = [o["data"][0] for o in response.json()["outputs"] if o["name"] == "version"]
    return str(version)


def test_pinned_model_survives_random_access_within_budget(client: httpx.Client) -> None:
    assert client.post("/v2/repository/models/pinned/load").status_code == 200
    stop = threading.Event()
    wrong: list[str] = []
    most = 0

    def use(seed: int) -> int:
        chance = random.Random(seed)
        answered = 0
        with httpx.Client(base_url=str(client.base_url), timeout=60) as http:
            while not stop.is_set():
                name = chance.choice(MODELS)
                response = infer(http, name)
                if response.status_code != 200 or text_of(response) != f"I am {name}":
                    wrong.append(f"{name}: {response.status_code} {response.text}")
                answered += 1
        return answered

    with ThreadPoolExecutor(4) as clients:
        answers = [clients.submit(use, seed) for seed in range(4)]
        ends = time.monotonic() + 8
        while time.monotonic() < ends:
            loaded = ready_models(client) - {"pinned"}
            most = max(most, len(loaded & set(MODELS)))
            time.sleep(0.05)
        stop.set()
        total = sum(answer.result() for answer in answers)
    assert not wrong, wrong[:5]
    assert total > 10, total
    assert most <= BUDGET
    assert "pinned" in ready_models(client)
    assert text_of(infer(client, "pinned")) == "I am pinned"


def test_concurrent_first_requests_load_once(client: httpx.Client, server: ServerProcess) -> None:
    with ThreadPoolExecutor(16) as clients:
        texts = list(clients.map(lambda _: text_of(infer(client, "slow")), range(16)))
    assert texts == ["I am slow"] * 16
    # Loaded once per process; with protocol processes process 0 tells it (others: DEBUG).
    infos = [line for line in server.log().splitlines() if " INFO " in line]
    assert sum("Loading model 'slow'" in line for line in infos) == 1


def test_failing_load_answers_every_waiter(client: httpx.Client) -> None:
    with ThreadPoolExecutor(6) as clients:
        answers = list(clients.map(lambda _: infer(client, "broken"), range(6)))
    for answer in answers:
        assert answer.status_code == 500, answer.text
        assert "failed to load 'broken'" in answer.json()["error"]
        assert "cannot find the weights" in answer.json()["error"]


def test_loads_and_evictions_are_counted(server: ServerProcess) -> None:
    """The loads and evictions are counted (summed over the processes)."""
    metrics = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30).text
    assert 'model_loads_total{model_name="slow"}' in metrics
    assert "model_evictions_total" in metrics
    # Each load of "slow" (each process loads its copy) is in the load histogram.
    slow = 'model_name="slow",model_version=""'
    loads = sample(metrics, 'model_loads_total{model_name="slow"}')
    assert sample(metrics, f"model_load_seconds_count{{{slow}}}") == loads >= 1
    if processes(server) == 1:  # its runtime's load takes 1.5 s (protocol processes
        # take the copy their fork parent loaded: in no time)
        assert sample(metrics, f'model_load_seconds_bucket{{le="1.0",{slow}}}') == 0
        assert sample(metrics, f"model_load_seconds_sum{{{slow}}}") >= 1.5 * loads


def sample(metrics: str, series: str) -> float:
    """The value of ``series`` (its exact text) in a Prometheus exposition."""
    values = [line.split()[-1] for line in metrics.splitlines() if line.startswith(series + " ")]
    assert len(values) == 1, (series, metrics[:2000])
    return float(values[0])


def processes(server: ServerProcess) -> int:
    return int(json.loads((server.repository / "settings.json").read_text())["protocol_processes"])


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A budget of one model; ``busy`` answers after the ``sleep`` it is sent."""
    repository = tmp_path_factory.mktemp("one-slot")
    add_artifact(repository, "other")
    add_custom_model(repository, "busy", "SlowEcho", threads_per_worker=2)  # off the loop
    add_custom_model(repository, "stream", "Tokens")
    settings = {"load_on_request": True, "max_loaded_models": 1}
    with start_server(repository, settings) as process:
        yield process


def test_busy_model_is_not_evicted_and_the_wait_ends_in_503(
    one_slot: ServerProcess, tmp_path: Path
) -> None:
    """(A request in flight holds its model.)"""
    started = tmp_path / "started"
    with httpx.Client(base_url=one_slot.url, timeout=60) as client:
        with ThreadPoolExecutor(1) as clients:
            held = clients.submit(infer, client, "busy", sleep=3, started=str(started))
            wait_for(started.exists, timeout=60, what="the busy request to start")
            refused = infer(client, "other", timeout=300_000)
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"]
            if processes(one_slot) == 1:  # else the others may have evicted it: still loading
                assert "max_loaded_models (1)" in refused.json()["error"]
            assert held.result().status_code == 200
        assert text_of(infer(client, "other")) == "I am other"  # busy is idle now: evicted
        assert ready_models(client) == {"other"}
    assert "Evicted model 'busy' (least recently used; 1 of 1 loaded)" in one_slot.log()


def test_an_open_stream_holds_its_model(one_slot: ServerProcess) -> None:
    body = {"id": "long", "inputs": [INPUT], "parameters": {"count": 8, "delay_ms": 250}}
    url = f"{one_slot.url}/v2/models/stream/infer_stream"
    with httpx.Client(base_url=one_slot.url, timeout=60) as client:
        with httpx.stream("POST", url, json=body, timeout=60) as sse:
            lines = sse.iter_lines()
            next(line for line in lines if line.startswith("data: "))  # it is open
            refused = infer(client, "other", timeout=300_000)
            rest = [line for line in lines if line.startswith("data: ")]
        assert refused.status_code == 503, refused.text
        assert len(rest) == 7  # the stream ran to its end
        assert text_of(infer(client, "other")) == "I am other"


def test_a_model_in_the_model_host_loads_on_request(tmp_path: Path) -> None:
    """A batched model runs in the model host: the protocol processes bind to it on
    request, and let it go when they evict it."""
    add_artifact(tmp_path, "plain")
    add_custom_model(tmp_path, "batched", "BatchRecorder", max_batch_size=4, max_batch_time=0.001)
    settings = {"load_on_request": True, "max_loaded_models": 1, "protocol_processes": 2}
    with start_server(tmp_path, settings) as server:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for _ in range(2):  # loaded, evicted by plain, loaded again
                answer = infer(client, "batched")
                assert answer.status_code == 200, answer.text
                assert text_of(infer(client, "plain")) == "I am plain"
        assert "runs in the model host" in server.log()
        assert "Evicted model 'batched'" in server.log()
