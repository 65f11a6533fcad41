"""Adaptive batching and the queue policy on a real server, in-process and with workers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

from .metrics_helpers import model, scrape, value

LONE_WAIT = 1.0  # the batched model's max_batch_time: a lone request must not wait it


def write_models(repository: Path) -> Path:
    """`batched` (adaptive batching, each batch taking 20 ms) and `guarded` (one slot,
    a bounded queue, priorities and a queue timeout)."""
    batched = {"max_batch_size": 16, "max_batch_time": LONE_WAIT}
    add_custom_model(
        repository, "batched", "BatchRecorder", **batched, parameters={"extra": {"delay": 0.02}}
    )
    # One slot (one worker, one thread), so a held request keeps the rest queued.
    guarded = {"max_queue_size": 3, "default_priority_level": 2, "timeout": 20, "workers": 1}
    add_custom_model(repository, "guarded", "BatchRecorder", **guarded)
    return repository


# The same models in process, in 2 workers, and in the model host behind 2 protocol
# processes (both models batch or size their workers: neither is copied into each),
# where a client's cancel and disconnect must reach the host's queue.
LAYOUTS = {
    "in-process": {"parallel_workers": 0},
    "2-workers": {"parallel_workers": 2},
    "model-host": {"parallel_workers": 2, "protocol_processes": 2},
}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    repository = write_models(tmp_path_factory.mktemp("batching"))
    with start_server(repository, LAYOUTS[request.param]) as process:
        yield process


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    limits = httpx.Limits(max_connections=64)
    with httpx.Client(base_url=server.url, timeout=30, limits=limits) as client:
        yield client


def infer(client: httpx.Client, model: str, x: list[list[float]], **extra: Any) -> httpx.Response:
    body: dict[str, Any] = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [len(x), len(x[0])], "data": x}],
        **extra,
    }
    return client.post(f"/v2/models/{model}/infer", json=body)


def outputs(response: httpx.Response) -> dict[str, np.ndarray]:
    assert response.status_code == 200, response.text
    return {
        out["name"]: np.array(out["data"]).reshape(out["shape"])
        for out in response.json()["outputs"]
    }


def test_concurrent_requests_of_any_size_get_their_own_answers(client: httpx.Client) -> None:
    requested = [None, [{"name": "y"}], [{"name": "batch_rows"}, {"name": "y"}]]
    cases = []
    for number in range(48):
        rows = 1 + number % 5
        x = (np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) + 100 * number).tolist()
        extra: dict[str, Any] = {"id": f"req-{number}"}
        if requested[number % 3] is not None:
            extra["outputs"] = requested[number % 3]
        cases.append((x, extra))
    with ThreadPoolExecutor(24) as threads:
        answers = list(
            threads.map(lambda case: infer(client, "batched", case[0], **case[1]), cases)
        )
    batch_sizes = []
    for (x, extra), answer in zip(cases, answers, strict=True):
        got = outputs(answer)
        assert answer.json()["id"] == extra["id"]
        names = [o["name"] for o in extra.get("outputs", [])] or ["y", "batch_rows"]
        assert [o["name"] for o in answer.json()["outputs"]] == names
        np.testing.assert_array_equal(got["y"], np.array(x, dtype=np.float32) * 2)
        if "batch_rows" in got:
            assert got["batch_rows"].shape == (len(x),)
            batch_sizes.append(int(got["batch_rows"][0]))
    assert max(batch_sizes) > 1, "under concurrency requests share batches"
    assert max(batch_sizes) <= 16, "a batch never exceeds max_batch_size rows"


def test_bytes_inputs_batch_exactly(client: httpx.Client) -> None:
    def send(words: list[str]) -> httpx.Response:
        tensor = {"name": "text", "datatype": "BYTES", "shape": [len(words)], "data": words}
        return client.post("/v2/models/batched/infer", json={"inputs": [tensor]})

    cases = [[f"w{n}", "", "é" * n][: 1 + n % 3] for n in range(30)]
    with ThreadPoolExecutor(15) as threads:
        answers = list(threads.map(send, cases))
    for words, answer in zip(cases, answers, strict=True):
        assert answer.status_code == 200, answer.text
        text = answer.json()["outputs"][0]
        assert text["name"] == "text" and text["data"] == [w * 2 for w in words]


def test_a_lone_request_does_not_wait_for_company(client: httpx.Client) -> None:
    infer(client, "batched", [[0.0, 0.0]])  # warm
    started = time.perf_counter()
    got = outputs(infer(client, "batched", [[1.0, 2.0]]))
    elapsed = time.perf_counter() - started
    assert got["batch_rows"].tolist() == [1]
    assert elapsed < LONE_WAIT / 2, f"a lone request took {elapsed:.3f}s"


@pytest.fixture
def held(server: ServerProcess, client: httpx.Client) -> Iterator[Callable[[], None]]:
    """Keeps the guarded model's one slot busy until the test calls the returned opener."""
    folder = server.repository / "guarded"
    for name in ("open", "holding", "ran.txt"):
        (folder / name).unlink(missing_ok=True)
    threads = ThreadPoolExecutor(1)
    holder = threads.submit(infer, client, "guarded", [[-1.0]], parameters={"hold": True})
    wait_for(lambda: (folder / "holding").exists(), "the holding request to run")

    def open_gate() -> None:
        (folder / "open").touch()
        assert holder.result().status_code == 200

    yield open_gate
    (folder / "open").touch()
    threads.shutdown()


def fill_check(client: httpx.Client) -> bool:
    """True once the guarded queue is full: a probe (1 µs deadline) gets 503, not 504."""
    started = time.perf_counter()
    probe = infer(client, "guarded", [[99.0]], parameters={"timeout": 1})
    if probe.status_code == 504:
        assert "past its timeout" in probe.json()["error"]
        return False
    assert probe.status_code == 503, probe.text
    assert "queue of model 'guarded' is full" in probe.json()["error"]
    assert probe.headers["retry-after"] == "1"
    assert time.perf_counter() - started < 1.0, "a full queue refuses at once"
    return True


def queued(server: ServerProcess) -> float:
    samples = scrape(server.metrics_port)
    return value(samples, "batch_request_queue", **model("guarded"))


def ran(server: ServerProcess) -> list[str]:
    return (server.repository / "guarded" / "ran.txt").read_text().split()


def test_priority_order_full_queue_and_deadlines(
    server: ServerProcess, client: httpx.Client, held: Callable[[], None]
) -> None:
    with ThreadPoolExecutor(3) as threads:
        sent = [
            threads.submit(infer, client, "guarded", [[3.0]], parameters={"priority": 3}),
            threads.submit(infer, client, "guarded", [[2.0]]),
            threads.submit(infer, client, "guarded", [[1.0]], parameters={"priority": 1}),
        ]
        wait_for(lambda: fill_check(client), "the queue to fill")
        held()
        assert [outputs(f.result())["y"].tolist() for f in sent] == [[[6.0]], [[4.0]], [[2.0]]]
    assert ran(server) == ["-1.0", "1.0", "2.0", "3.0"], "probes never ran; priority 1 first"


def test_a_cancelled_grpc_call_is_not_run(
    server: ServerProcess, client: httpx.Client, held: Callable[[], None]
) -> None:
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = triton.service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = triton.service_pb2.ModelInferRequest(model_name="guarded")
        tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 1])
        tensor.contents.fp32_contents.append(8.0)
        with pytest.raises(grpc.RpcError) as cancelled:
            stub.ModelInfer(request, timeout=0.5)
        assert cancelled.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(lambda: not fill_check(client), "the queue to let go of the cancelled call")
    held()
    outputs(infer(client, "guarded", [[5.0]]))
    assert ran(server) == ["-1.0", "5.0"]


def test_a_disconnected_http_client_is_not_run(
    server: ServerProcess, client: httpx.Client, held: Callable[[], None]
) -> None:
    with (
        httpx.Client(base_url=server.url, timeout=0.5) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        infer(impatient, "guarded", [[7.0]])
    # Open the gate only once the server has noticed the client left: opening it
    # first would race the disconnect against the queue handing out the slot.
    wait_for(lambda: queued(server) == 0, "the disconnected request to leave the queue")
    held()
    outputs(infer(client, "guarded", [[5.0]]))
    assert ran(server) == ["-1.0", "5.0"]


def test_grpc_maps_a_full_queue_to_unavailable(
    server: ServerProcess, client: httpx.Client, held: Callable[[], None]
) -> None:
    waiting: list[Future[httpx.Response]] = []
    with ThreadPoolExecutor(3) as threads:
        waiting = [threads.submit(infer, client, "guarded", [[float(n)]]) for n in range(3)]
        wait_for(lambda: fill_check(client), "the queue to fill")
        with triton.InferenceServerClient(server.grpc_address) as grpc_client:
            x = triton.InferInput("x", [1, 1], "FP32")
            x.set_data_from_numpy(np.array([[1.0]], dtype=np.float32))
            with pytest.raises(triton.InferenceServerException) as refused:
                grpc_client.infer("guarded", [x])
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
        held()
        assert all(f.result().status_code == 200 for f in waiting)
