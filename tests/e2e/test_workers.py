"""Inference in worker processes: same answers, spread over workers, per-model placement."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.support.models import add_custom_model
from tests.support.procstat import serving_processes
from tests.support.serverproc import ServerProcess, start_server

# Requests whose full answers must not depend on where inference runs.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("iris", {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4],
                          "data": [5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3]}]}),
    ("iris", {"inputs": [{"name": "x", "datatype": "FP64", "shape": [1, 4],
                          "data": [5.9, 3.0, 4.2, 1.5]}], "id": "req-7"}),
    ("echo", {"inputs": [
        {"name": "b", "datatype": "BOOL", "shape": [2], "data": [True, False]},
        {"name": "u8", "datatype": "UINT8", "shape": [2, 2], "data": [0, 255, 1, 2]},
        {"name": "i64", "datatype": "INT64", "shape": [2], "data": [-(2**63), 2**63 - 1]},
        {"name": "f16", "datatype": "FP16", "shape": [2], "data": [0.5, -1.25]},
        {"name": "bf16", "datatype": "BF16", "shape": [2], "data": [0.5, -1.25]},
        {"name": "f64", "datatype": "FP64", "shape": [3], "data": [0.1, -1e300, 2]},
        {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["héllo", ""]},
        {"name": "big", "datatype": "FP32", "shape": [64, 64], "data": [0.25] * 4096},
        {"name": "e", "datatype": "INT32", "shape": [0, 3], "data": []},
    ], "parameters": {"content_type": "np", "tag": "t"}}),
    ("typed", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                           "data": ["a b"], "parameters": {"content_type": "str"}}]}),
    ("double", {"inputs": [{"name": "x", "datatype": "INT32", "shape": [3], "data": [1, 2, 3]}],
                "outputs": [{"name": "y"}, {"name": "version"}]}),
    ("double/versions/1", {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1],
                                       "data": [1.5]}], "outputs": [{"name": "version"}]}),
    ("fails", {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]}),
    ("iris", {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}),
    ("double", {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}],
                "outputs": [{"name": "nope"}]}),
]  # fmt: skip


def copy_repository(source: Path, target: Path) -> Path:
    ignore = shutil.ignore_patterns("settings.json", "*.log", "__pycache__")
    shutil.copytree(source, target, ignore=ignore)
    return target


@pytest.fixture(scope="module")
def workers_repository(main_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The main repository plus models that report which worker they run in."""
    repository = copy_repository(main_repository, tmp_path_factory.mktemp("workers") / "repo")
    add_custom_model(repository, "where", "WhereAmI")
    add_custom_model(repository, "where1", "WhereAmI", workers=1)
    add_custom_model(repository, "where2", "WhereAmI", workers=2)
    add_custom_model(repository, "gpu", "WhereAmI", devices=["cuda:0", "cuda:1"])
    rendezvous = {"parameters": {"extra": {"parties": 3, "timeout": 20}}}
    add_custom_model(
        repository, "meet", "Rendezvous", workers=1, threads_per_worker=3, **rendezvous
    )
    add_custom_model(
        repository, "ameet", "AsyncRendezvous", workers=1, threads_per_worker=3, **rendezvous
    )
    return repository


@pytest.fixture(scope="module")
def three_workers(workers_repository: Path) -> Iterator[ServerProcess]:
    # The server's own workers, each holding every model (load() runs in each, the
    # worker numbers are 0-2): fork_workers would fork each model's (test_fork_workers).
    settings = {"parallel_workers": 3, "fork_workers": False}
    with start_server(workers_repository, settings) as process:
        yield process


@pytest.fixture(scope="module")
def one_worker(
    main_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository = copy_repository(main_repository, tmp_path_factory.mktemp("one") / "repo")
    with start_server(repository, {"parallel_workers": 1}) as process:
        yield process


def post(server: ServerProcess, model: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=30)


def where(server: ServerProcess, model: str, sleep: float = 0.0) -> dict[str, Any]:
    body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [0]}],
        "parameters": {"sleep": sleep},
    }
    response = post(server, model, body)
    assert response.status_code == 200, response.text
    return {output["name"]: output["data"][0] for output in response.json()["outputs"]}


def concurrently(server: ServerProcess, model: str, count: int, sleep: float) -> list[dict]:
    with ThreadPoolExecutor(count) as threads:
        return list(threads.map(lambda _: where(server, model, sleep), range(count)))


def loaded_in(repository: Path, model: str) -> dict[int, str]:
    """pid -> "<worker index> <device> <CUDA_VISIBLE_DEVICES>" for each load of ``model``."""
    files = (repository / model).glob("loaded-*")
    return {int(path.name.removeprefix("loaded-")): path.read_text() for path in files}


def test_answers_are_the_same_with_0_1_and_3_workers(
    server: ServerProcess, one_worker: ServerProcess, three_workers: ServerProcess
) -> None:
    for model, body in CASES:
        answers = [post(s, model, body) for s in (server, one_worker, three_workers)]
        statuses = [answer.status_code for answer in answers]
        assert len(set(statuses)) == 1, (model, statuses, [a.text for a in answers])
        bodies = [answer.json() for answer in answers]
        assert bodies[0] == bodies[1] == bodies[2], model


def test_binary_tensors_are_the_same_with_and_without_workers(
    server: ServerProcess, three_workers: ServerProcess
) -> None:
    data = np.arange(1000, dtype=np.float32).reshape(10, 100)
    header = (
        b'{"inputs":[{"name":"t","datatype":"FP32","shape":[10,100],'
        b'"parameters":{"binary_data_size":4000}}],'
        b'"outputs":[{"name":"t","parameters":{"binary_data":true}}]}'
    )
    answers = [
        httpx.post(
            f"{s.url}/v2/models/echo/infer",
            content=header + data.tobytes(),
            headers={"Inference-Header-Content-Length": str(len(header))},
            timeout=30,
        )
        for s in (server, three_workers)
    ]
    assert [a.status_code for a in answers] == [200, 200], answers[1].text
    assert answers[0].content == answers[1].content
    assert answers[1].content.endswith(data.tobytes())


def test_concurrent_requests_spread_over_the_workers(three_workers: ServerProcess) -> None:
    started = time.monotonic()
    answers = concurrently(three_workers, "where", count=3, sleep=0.5)
    elapsed = time.monotonic() - started
    assert len({answer["pid"] for answer in answers}) == 3, answers
    assert elapsed < 1.4, f"3 requests of 0.5 s on 3 idle workers took {elapsed:.2f}s"


def test_a_model_is_loaded_in_as_many_workers_as_it_asks(
    three_workers: ServerProcess, workers_repository: Path
) -> None:
    everywhere = loaded_in(workers_repository, "where")
    one, two = loaded_in(workers_repository, "where1"), loaded_in(workers_repository, "where2")
    assert (len(everywhere), len(one), len(two)) == (3, 1, 2)
    assert set(one) | set(two) <= set(everywhere), "all workers are the server's three"
    answers = concurrently(three_workers, "where2", count=4, sleep=0.3)
    assert {answer["pid"] for answer in answers} == set(two)


def test_one_thread_per_worker_runs_a_models_requests_one_at_a_time(
    three_workers: ServerProcess,
) -> None:
    started = time.monotonic()
    answers = concurrently(three_workers, "where1", count=2, sleep=0.3)
    assert time.monotonic() - started >= 0.6
    assert len({answer["pid"] for answer in answers}) == 1


@pytest.mark.parametrize("model", ["meet", "ameet"])
def test_threads_per_worker_runs_requests_of_one_worker_at_once(
    three_workers: ServerProcess, model: str
) -> None:
    """The model answers only once 3 requests are inside it at the same time."""
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [0]}]}
    with ThreadPoolExecutor(3) as threads:
        answers = list(threads.map(lambda _: post(three_workers, model, body), range(3)))
    assert [a.status_code for a in answers] == [200, 200, 200], answers[0].text
    assert len({a.json()["outputs"][0]["data"][0] for a in answers}) == 1, "one worker"


def test_threads_per_worker_without_worker_processes(
    tmp_path: Path, start: Callable[..., ServerProcess]
) -> None:
    rendezvous = {"parameters": {"extra": {"parties": 3, "timeout": 20}}}
    add_custom_model(tmp_path, "meet", "Rendezvous", threads_per_worker=3, **rendezvous)
    add_custom_model(tmp_path, "ameet", "AsyncRendezvous", threads_per_worker=3, **rendezvous)
    # Pinned to one process: a copied model (parallel_workers 0) runs threads_per_worker
    # threads in each protocol process (docs/design.md, the placement table), and the
    # three parties must meet in one copy, which three connections need not reach.
    server = start(tmp_path, settings={"protocol_processes": 1})  # parallel_workers 0
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [0]}]}
    for model in ("meet", "ameet"):
        with ThreadPoolExecutor(3) as threads:
            answers = list(threads.map(lambda _, m=model: post(server, m, body), range(3)))
        assert [a.status_code for a in answers] == [200, 200, 200], answers[0].text
        assert {a.json()["outputs"][0]["data"][0] for a in answers} == {server.process.pid}


def test_devices_set_cuda_visible_devices_per_worker(
    three_workers: ServerProcess, workers_repository: Path
) -> None:
    """Worker i gets device i mod 2; the model's load sees the variable already set."""
    loads = sorted(loaded_in(workers_repository, "gpu").values())
    assert loads == ["0 cuda:0 0", "1 cuda:1 1", "2 cuda:0 0"]


def test_workers_do_not_import_the_web_stack(three_workers: ServerProcess) -> None:
    answer = where(three_workers, "where")
    assert answer["web_modules"] == "", "imported in a worker"
    assert answer["worker"] in ("0", "1", "2")


def test_without_workers_runtimes_run_in_the_main_process(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}]}
    answer = post(server, "double", body).json()
    pid = next(o for o in answer["outputs"] if o["name"] == "pid")["data"][0]
    assert pid in serving_processes(server.process.pid), "not in a worker"


def test_a_load_error_in_a_worker_comes_back_with_its_message(
    three_workers: ServerProcess, workers_repository: Path
) -> None:
    add_custom_model(workers_repository, "broken", "FailsToLoad")
    response = httpx.post(f"{three_workers.url}/v2/repository/models/broken/load", timeout=30)
    assert response.status_code == 500
    assert "cannot find the weights" in response.json()["error"]
    index = httpx.post(f"{three_workers.url}/v2/repository/index", json={}, timeout=30).json()
    (entry,) = [e for e in index if e["name"] == "broken"]
    assert entry["state"] == "UNAVAILABLE" and "cannot find the weights" in entry["reason"]
    assert where(three_workers, "where")["pid"] > 0, "the others keep serving"
