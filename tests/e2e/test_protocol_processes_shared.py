"""What is server-wide holds across two protocol processes (#27's list).

Each check runs on fresh connections until the requests have reached both
protocol processes: a probe asks the ``slow`` model (testmodels.SlowEcho, which
answers its pid) and then makes its check on the same connection, so every
check is known to have run in each process. A repository load or unload, a log
level, a shared memory region registered through one connection hold on the
others; statistics and ``/metrics`` answer the totals of both; adaptive batching
still forms batches; a sequence model keeps its requests on one instance.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.host.placement import SMALLEST_HOSTING
from inferd.protocol import pb, pb_grpc
from inferd.settings.cpu_quota import available_cpus
from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.procstat import descendants, served_by
from tests.support.serverproc import (
    READY_PATH,
    ServerProcess,
    free_ports,
    server_environment,
    spawn,
    start_server,
    write_settings,
)
from tests.support.triton_shm import shared_memory as shm

from .metrics_helpers import model, scrape, value

PROCESSES = 2
PREFIX = f"/inferd-pp-{os.getpid()}-"
ROW = 16
MAX_PROBES = 80  # fresh connections before giving up on reaching every process


def write_models(repository: Path) -> Path:
    add_custom_model(repository, "slow", "SlowEcho")
    add_custom_model(repository, "simple", "AddSub")
    add_custom_model(repository, "other", "Echo")
    return repository


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = write_models(tmp_path_factory.mktemp("shared"))
    settings = {
        "protocol_processes": PROCESSES,
        "shared_memory_enabled": True,
        "shared_memory_key_prefix": PREFIX,
    }
    with start_server(repository, settings) as process:
        yield process


def pid_of(client: httpx.Client) -> int:
    x = {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}
    response = client.post("/v2/models/slow/infer", json={"inputs": [x]})
    assert response.status_code == 200, response.text
    outputs = {output["name"]: output for output in response.json()["outputs"]}
    return int(outputs["pid"]["data"][0])


def on_every_process(server: ServerProcess, check: Callable[[httpx.Client], None]) -> set[int]:
    """Run ``check`` on fresh connections until it has run in every protocol process
    (at least 6 times); the pids it ran in."""
    seen: set[int] = set()
    for probe in range(MAX_PROBES):
        with httpx.Client(base_url=server.url, timeout=30) as client:
            seen.add(pid_of(client))
            check(client)
        if len(seen) == PROCESSES and probe >= 5:
            return seen
    raise AssertionError(f"{MAX_PROBES} connections reached processes {seen} only")


def test_an_unload_and_a_load_through_one_connection_hold_in_every_process(
    server: ServerProcess,
) -> None:
    with httpx.Client(base_url=server.url) as one:
        assert one.post("/v2/repository/models/other/unload").status_code == 200

    def unloaded(client: httpx.Client) -> None:
        assert client.get("/v2/models/other/ready").status_code != 200
        body = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
        assert client.post("/v2/models/other/infer", json=body).status_code in (400, 404, 503)

    on_every_process(server, unloaded)
    # Loaded again over gRPC: the other protocol's entry takes the same road.
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="other"))
    on_every_process(server, lambda c: _assert_status(c.get("/v2/models/other/ready"), 200))


def _assert_status(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text


def test_a_log_level_set_through_one_connection_holds_in_every_process(
    server: ServerProcess,
) -> None:
    with httpx.Client(base_url=server.url) as one:
        changed = one.post("/v2/logging", json={"log_verbose_level": 1})
        assert changed.status_code == 200, changed.text
    try:
        on_every_process(
            server, lambda c: _assert_equal(c.get("/v2/logging").json()["log_verbose_level"], 1)
        )
    finally:
        with httpx.Client(base_url=server.url) as one:
            one.post("/v2/logging", json={"log_verbose_level": 0})


def _assert_equal(got: Any, expected: Any) -> None:
    assert got == expected


def test_a_region_registered_through_one_connection_serves_every_process(
    server: ServerProcess,
) -> None:
    key = f"{PREFIX}inputs"
    handle = shm.create_shared_memory_region("inputs", key, 2 * ROW * 4)
    try:
        first = np.arange(ROW, dtype=np.int32).reshape(1, ROW)
        second = np.full((1, ROW), 3, dtype=np.int32)
        shm.set_shared_memory_region(handle, [first, second])
        registering = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        registering.register_system_shared_memory("inputs", key, 2 * ROW * 4)
        registering.close()

        def adds_from_the_region(client: httpx.Client) -> None:
            inputs = [
                {"name": f"INPUT{i}", "shape": [1, ROW], "datatype": "INT32",
                 "parameters": {"shared_memory_region": "inputs",
                                "shared_memory_byte_size": ROW * 4,
                                "shared_memory_offset": i * ROW * 4}}
                for i in range(2)
            ]  # fmt: skip
            response = client.post("/v2/models/simple/infer", json={"inputs": inputs})
            assert response.status_code == 200, response.text
            outputs = {out["name"]: out["data"] for out in response.json()["outputs"]}
            assert outputs["OUTPUT0"] == (first + second).ravel().tolist()

        on_every_process(server, adds_from_the_region)
        # Unregistered over gRPC through another connection: gone everywhere.
        unregistering = grpcclient.InferenceServerClient(server.grpc_address)
        unregistering.unregister_system_shared_memory("inputs")
        unregistering.close()

        def refused(client: httpx.Client) -> None:
            status = client.get("/v2/systemsharedmemory/status").json()
            assert status == [], status

        on_every_process(server, refused)
    finally:
        shm.destroy_shared_memory_region(handle)


def test_statistics_and_metrics_count_every_request_of_both_processes_once(
    server: ServerProcess,
) -> None:
    metric = "model_infer_request_success_total"
    before = _model_counts(server, "slow")
    metric_before = value(scrape(server.metrics_port), metric, **model("slow"))
    seen: set[int] = set()
    for _ in range(30):  # 30 requests, each on a connection of its own
        with httpx.Client(base_url=server.url, timeout=30) as client:
            seen.add(pid_of(client))
    assert len(seen) == PROCESSES, seen
    after = _model_counts(server, "slow")
    assert after["inference_count"] - before["inference_count"] == 30
    assert after["execution_count"] - before["execution_count"] == 30
    metric_after = value(scrape(server.metrics_port), metric, **model("slow"))
    assert metric_after - metric_before == 30


def test_a_batched_models_requests_meet_in_the_model_hosts_one_batcher(tmp_path: Path) -> None:
    """A model that batches adaptively is not copied into every process (a batcher
    each would see a share of its requests): it runs in the model host, where 64
    concurrent requests on 64 connections, taken by both processes, meet in its one
    batcher, and are counted once."""
    delay = {"extra": {"delay": 0.05}}  # each batch takes 50 ms: requests meet meanwhile
    batching = {"max_batch_size": 16, "max_batch_time": 0.2, "parameters": delay}
    add_custom_model(tmp_path, "batched", "BatchRecorder", **batching)
    settings = {"protocol_processes": PROCESSES}
    with start_server(tmp_path, settings) as server:
        assert "runs in the model host" in server.log() and "max_batch_size: 16" in server.log()
        assert len(served_by(server.process.pid)) == PROCESSES + 1

        def one_request(number: int) -> int:
            x = {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [[number, 0.0]]}
            with httpx.Client(base_url=server.url, timeout=30) as client:
                response = client.post("/v2/models/batched/infer", json={"inputs": [x]})
            assert response.status_code == 200, response.text
            outputs = {out["name"]: out["data"] for out in response.json()["outputs"]}
            assert outputs["y"] == [2.0 * number, 0.0]
            return int(outputs["batch_rows"][0])

        with ThreadPoolExecutor(32) as pool:
            batch_rows = list(pool.map(one_request, range(64)))
        counts = _model_counts(server, "batched")
        samples = scrape(server.metrics_port)
    assert counts["inference_count"] == 64
    # Counted once, in the host: the protocol processes' proxies count nothing.
    assert value(samples, "model_infer_request_success_total", **model("batched")) == 64
    assert counts["execution_count"] < 64 and max(batch_rows) > 1, (counts, batch_rows)


def _model_counts(server: ServerProcess, name: str) -> dict[str, int]:
    stats = httpx.get(f"{server.url}/v2/models/{name}/stats").json()["model_stats"]
    return {
        "inference_count": sum(entry["inference_count"] for entry in stats),
        "execution_count": sum(entry["execution_count"] for entry in stats),
    }


def test_the_metrics_port_answers_both_processes(server: ServerProcess) -> None:
    samples = scrape(server.metrics_port)
    # And the model host, counted among them once a load after the start (the gRPC
    # load above) started it.
    everyone = len(served_by(server.process.pid))
    assert everyone in (PROCESSES, PROCESSES + 1)
    assert value(samples, "protocol_processes") == everyone
    assert value(samples, "protocol_processes_answered") == everyone


def test_a_sequence_model_runs_in_the_model_host_and_its_sequences_span_connections(
    tmp_path: Path,
) -> None:
    """A model with sequence_batching is not copied into every process: it runs in the
    model host, so a sequence's requests on connections taken by either process meet
    one running sum."""
    sequences = {"max_sequence_idle_microseconds": 60_000_000}
    add_custom_model(tmp_path, "acc", "Accumulator", sequence_batching=sequences)
    settings = {"protocol_processes": PROCESSES}
    with start_server(tmp_path, settings) as server:
        assert "runs in the model host" in server.log() and "sequence_batching" in server.log()
        totals = []
        for step, value_ in enumerate([5, 1, 7, 2]):
            parameters: dict[str, Any] = {"sequence_id": 42}
            if step == 0:
                parameters["sequence_start"] = True
            x = {"name": "x", "shape": [1], "datatype": "INT64", "data": [value_]}
            with httpx.Client(base_url=server.url, timeout=30) as client:  # a new connection
                body = {"inputs": [x], "parameters": parameters}
                response = client.post("/v2/models/acc/infer", json=body)
            assert response.status_code == 200, response.text
            outputs = {out["name"]: out["data"] for out in response.json()["outputs"]}
            totals.append(outputs["total"][0])
        assert totals == [5, 6, 13, 15]
        # A protocol process passes sequences on: it does not warn that it routes none.
        assert "has no sequence_batching" not in server.log()


def test_an_mlserver_settings_file_keeps_its_worker_processes(tmp_path: Path) -> None:
    """MLServer's settings.json (``parallel_workers`` and ports, no inferd key) runs
    its models in worker processes, as MLServer does; with the CPUs for it, behind
    one protocol process per CPU and the model host, else behind one process."""
    add_custom_model(tmp_path, "slow", "SlowEcho")
    http_port, grpc_port, metrics_port = free_ports(3)
    ports = {"http_port": http_port, "grpc_port": grpc_port, "metrics_port": metrics_port}
    write_settings(tmp_path, {"host": "127.0.0.1", "parallel_workers": 2, **ports})
    command = [sys.executable, "-m", "inferd", "start", str(tmp_path)]
    log = tmp_path / "inferd.log"
    with spawn(
        command, repository=tmp_path, log_path=log, ports=(http_port, grpc_port, metrics_port),
        env=server_environment(),
    ) as server:  # fmt: skip
        server.wait_until(READY_PATH)
        cpus = available_cpus()
        if cpus >= SMALLEST_HOSTING:
            expected = f"serving with {cpus} protocol processes and the model host"
            wait_for(lambda: expected in server.log(), server.log)
            assert "the server sets parallel_workers: 2" in server.log()
        with httpx.Client(base_url=server.url) as client:
            pid = pid_of(client)
        # A worker: not the server, nor one of the processes that hold connections.
        assert pid in descendants(server.process.pid)
        assert pid != server.process.pid
        if cpus >= SMALLEST_HOSTING:
            assert pid not in served_by(server.process.pid)


def test_no_process_says_ready_before_every_process_has_loaded(tmp_path: Path) -> None:
    """At the server's start the processes load together and are live meanwhile; the
    first ready answer (the model's, as the server's) means every process answers:
    none is still loading."""
    extra = {"extra": {"load_seconds": 2.0}}  # process 1 loads 2 s after process 0
    add_custom_model(tmp_path, "slow", "LoadsLaterInLaterProcesses", parameters=extra)
    settings = {"protocol_processes": PROCESSES}
    with start_server(tmp_path, settings, wait="/v2/health/live") as server:
        # The model's readiness (what `inferd tune` and many clients wait for) too.
        server.wait_until("/v2/models/slow/ready", timeout=60)
        seen: set[int] = set()
        for _ in range(30):
            with httpx.Client(base_url=server.url, timeout=30) as client:
                seen.add(pid_of(client))  # a 503 "loading" fails here
        assert len(seen) == PROCESSES


def test_a_slow_model_in_a_process_leaves_its_health_probes_answered(tmp_path: Path) -> None:
    """Models run in their protocol process: once a model's calls prove slow they run
    off the process's event loop, so a liveness probe is not held behind one."""
    add_custom_model(tmp_path, "slow", "SlowEcho")
    with start_server(tmp_path, {"protocol_processes": 1, "parallel_workers": 0}) as server:
        x = {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}
        url = f"{server.url}/v2/models/slow/infer"
        # Slow calls teach the process the model is slow (the first runs on the loop).
        for _ in range(2):
            body = {"inputs": [x], "parameters": {"sleep": 0.2}}
            assert httpx.post(url, json=body, timeout=30).status_code == 200
        started = tmp_path / "started"
        body = {"inputs": [x], "parameters": {"sleep": 3.0, "started": str(started)}}
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(httpx.post, url, json=body, timeout=30)
            wait_for(started.exists, "the slow call to start", 30)
            probe = httpx.get(f"{server.url}/v2/health/live", timeout=1.0)  # not 3 s
            assert probe.status_code == 200
            assert not running.done()
            assert running.result().status_code == 200
