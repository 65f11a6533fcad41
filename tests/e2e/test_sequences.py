"""Sequence batching as a Triton user sees it: tritonclient's public API only.

The model (testmodels.Accumulator) keeps a running sum per sequence in its process
and fails if a request of a sequence reaches a process that did not start it, or
if two requests of one sequence run at once; so a right answer means each sequence
stayed on its worker and ran in order. Served in process and by 2 workers, with
``threads_per_worker: 2``.
"""

from __future__ import annotations

import asyncio
import collections
import os
import queue
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
import tritonclient.http.aio as triton_http_aio
from tritonclient.utils import InferenceServerException

from tests.support.models import add_custom_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

STEPS = [5, 1, 7, 2, 9, 4]  # prefix sums differ under any reordering
IDLE_MICROSECONDS = 300_000


@pytest.fixture(scope="module", params=[0, 2], ids=["in-process", "2-workers"])
def workers(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def write_models(repository: Path) -> Path:
    """Accumulators: `acc`, `acc-slow` (slow steps), `acc-stream` (streams its sums),
    `acc-idle` (sequences expire after IDLE_MICROSECONDS)."""
    add_custom_model(
        repository,
        "acc",
        "Accumulator",
        threads_per_worker=2,
        sequence_batching={"max_sequence_idle_microseconds": 60_000_000},
        parameters={"extra": {"sleep": 0.002}},
    )
    add_custom_model(
        repository,
        "acc-slow",
        "Accumulator",
        threads_per_worker=2,
        sequence_batching={},
        parameters={"extra": {"sleep": 0.05}},
    )
    add_custom_model(
        repository,
        "acc-stream",
        "StreamingAccumulator",
        threads_per_worker=2,
        sequence_batching={},
        parameters={"extra": {"sleep": 0.002}},
    )
    add_custom_model(
        repository,
        "acc-idle",
        "Accumulator",
        sequence_batching={"max_sequence_idle_microseconds": IDLE_MICROSECONDS},
    )
    return repository


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Iterator[ServerProcess]:
    repository = write_models(tmp_path_factory.mktemp(f"sequences-{workers}"))
    with start_server(repository, settings={"parallel_workers": workers}) as process:
        yield process


def _inputs(module: Any, value: int) -> list[Any]:
    x = module.InferInput("x", [1], "INT64")
    x.set_data_from_numpy(np.array([value], dtype=np.int64))
    return [x]


def _run_sequence(
    client: Any, sequence_id: int | str, opened: threading.Barrier
) -> list[tuple[int, int]]:
    """Send one whole sequence over gRPC, one request at a time: (total, pid) of each
    answer. Every client has started its sequence before any sends the rest."""
    answers = []
    for step, value in enumerate(STEPS):
        result = client.infer(
            "acc",
            _inputs(triton_grpc, value),
            sequence_id=sequence_id,
            sequence_start=step == 0,
            sequence_end=step == len(STEPS) - 1,
        )
        answers.append(_total_and_pid(result))
        if step == 0:
            opened.wait(timeout=30)
    return answers


def _total_and_pid(result: Any) -> tuple[int, int]:
    return int(result.as_numpy("total")[0]), int(result.as_numpy("pid")[0])


def _expected_totals() -> list[int]:
    return [int(total) for total in np.cumsum(STEPS)]


def _check_placement(pids_by_sequence: dict[Any, list[int]], workers: int) -> None:
    for sequence_id, pids in pids_by_sequence.items():
        assert len(set(pids)) == 1, f"sequence {sequence_id} moved between processes: {pids}"
    placed = collections.Counter(pids[0] for pids in pids_by_sequence.values())
    if workers:  # spread evenly over the workers, by open sequences
        assert sorted(placed.values()) == [len(pids_by_sequence) // 2] * 2, placed


def test_eight_interleaved_clients_over_http_and_grpc(server: ServerProcess, workers: int) -> None:
    """4 HTTP clients (tritonclient.http.aio: its sync client is not thread-safe) with
    integer ids and 4 gRPC clients (threads) with string ids, all at once."""
    opened = threading.Barrier(8)
    results: dict[Any, list[tuple[int, int]]] = {}

    def grpc_client_run(index: int) -> None:
        client = triton_grpc.InferenceServerClient(server.grpc_address)
        try:
            results[f"grpc-{index}"] = _run_sequence(client, f"grpc-{index}", opened)
        finally:
            client.close()

    async def http_client_run(sequence_id: int) -> None:
        client = triton_http_aio.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            answers = []
            for step, value in enumerate(STEPS):
                result = await client.infer(
                    "acc",
                    _inputs(triton_http_aio, value),
                    sequence_id=sequence_id,
                    sequence_start=step == 0,
                    sequence_end=step == len(STEPS) - 1,
                )
                answers.append(_total_and_pid(result))
                if step == 0:
                    await asyncio.to_thread(opened.wait, 30)
            results[sequence_id] = answers
        finally:
            await client.close()

    async def http_clients() -> None:
        await asyncio.gather(*(http_client_run(1000 + index) for index in range(4)))

    threads = [threading.Thread(target=grpc_client_run, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=asyncio.run, args=(http_clients(),)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 8
    for sequence_id, answers in results.items():
        assert [total for total, _ in answers] == _expected_totals(), sequence_id
    _check_placement({sid: [pid for _, pid in a] for sid, a in results.items()}, workers)
    ended = wait_for(lambda: _ended(server, "acc") >= {str(sid) for sid in results}, "sequence_end")
    assert ended


def test_interleaved_sequences_on_grpc_streams(server: ServerProcess, workers: int) -> None:
    """8 clients, each with one stream carrying two sequences interleaved, every request
    sent without waiting for answers: order and placement still hold."""
    answers: dict[int, list[tuple[Any, Any]]] = {}
    opened = threading.Barrier(8)

    def client_run(index: int) -> None:
        received: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client = triton_grpc.InferenceServerClient(server.grpc_address)
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        sequences = [f"s{index}a", 2000 + index]
        try:
            for step, value in enumerate(STEPS):
                for sequence_id in sequences:
                    client.async_stream_infer(
                        "acc",
                        _inputs(triton_grpc, value),
                        request_id=f"{sequence_id}/{step}",
                        sequence_id=sequence_id,
                        sequence_start=step == 0,
                        sequence_end=step == len(STEPS) - 1,
                    )
                if step == 0:
                    opened.wait(timeout=30)
            got = [received.get(timeout=30) for _ in range(len(STEPS) * len(sequences))]
            answers[index] = got
        finally:
            client.stop_stream()
            client.close()

    threads = [threading.Thread(target=client_run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(answers) == 8
    pids: dict[str, list[int]] = collections.defaultdict(list)
    totals: dict[str, list[int]] = collections.defaultdict(list)
    for got in answers.values():
        for result, error in got:
            assert error is None, error
            sequence_id = result.get_response().id.split("/")[0]
            totals[sequence_id].append(int(result.as_numpy("total")[0]))
            pids[sequence_id].append(int(result.as_numpy("pid")[0]))
    assert len(totals) == 16
    for sequence_id, seen in totals.items():
        assert seen == _expected_totals(), sequence_id
    _check_placement(pids, workers)


def test_a_sequence_sent_at_once_runs_one_request_at_a_time(server: ServerProcess) -> None:
    """Every request of one sequence sent at once on a stream, to a model with two
    threads: they run one after another, in order, never side by side."""
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=lambda result, error: received.put((result, error)))
    try:
        for step, value in enumerate(STEPS):
            client.async_stream_infer(
                "acc-slow",
                _inputs(triton_grpc, value),
                sequence_id="at-once",
                sequence_start=step == 0,
                sequence_end=step == len(STEPS) - 1,
            )
        got = [received.get(timeout=30) for _ in STEPS]
    finally:
        client.stop_stream()
        client.close()
    assert [error for _, error in got] == [None] * len(STEPS)
    assert [int(result.as_numpy("total")[0]) for result, _ in got] == _expected_totals()


def test_a_streaming_model_keeps_each_sequences_state(server: ServerProcess, workers: int) -> None:
    """predict_stream of a sequence runs on its worker too: a gRPC stream of
    async_stream_infer calls for four sequences, each request sent without waiting,
    each answered by one response per element of its input, totals in order."""
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    client.start_stream(callback=lambda result, error: received.put((result, error)))
    sequences = ["chat-a", "chat-b", 3001, 3002]
    chunks = [[5, 1], [7, 2, 9], [4]]
    try:
        for step, chunk in enumerate(chunks):
            for sequence_id in sequences:
                x = triton_grpc.InferInput("x", [len(chunk)], "INT64")
                x.set_data_from_numpy(np.array(chunk, dtype=np.int64))
                client.async_stream_infer(
                    "acc-stream",
                    [x],
                    request_id=f"{sequence_id}/{step}",
                    sequence_id=sequence_id,
                    sequence_start=step == 0,
                    sequence_end=step == len(chunks) - 1,
                )
        got = [received.get(timeout=30) for _ in range(len(sequences) * 6)]
    finally:
        client.stop_stream()
        client.close()
    totals: dict[str, list[int]] = collections.defaultdict(list)
    pids: dict[str, list[int]] = collections.defaultdict(list)
    for result, error in got:
        assert error is None, error
        sequence_id = result.get_response().id.split("/")[0]
        totals[sequence_id].append(int(result.as_numpy("total")[0]))
        pids[sequence_id].append(int(result.as_numpy("pid")[0]))
    for sequence_id in sequences:
        assert totals[str(sequence_id)] == _expected_totals(), sequence_id
    _check_placement(pids, workers)
    wait_for(lambda: {str(s) for s in sequences} <= _ended(server, "acc-stream"), "sequence_end")


@pytest.fixture(scope="module")
def http_client(server: ServerProcess) -> Iterator[Any]:
    """tritonclient's sync HTTP client, made and dropped on the main thread: it is
    gevent-based, and closing it from another thread (a collection there) fails."""
    client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    yield client
    client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_refused_requests_say_why(server: ServerProcess, http_client: Any, protocol: str) -> None:
    if protocol == "http":
        client, module = http_client, triton_http
    else:
        client, module = triton_grpc.InferenceServerClient(server.grpc_address), triton_grpc
    try:
        # A request of a sequence that was never started.
        error = _refused(client, module, sequence_id=31337, sequence_start=False)
        assert "sequence 31337 to model 'acc' must specify the START flag" in error.message()
        assert "is not open" in error.message()
        # A second start of an open sequence.
        client.infer("acc", _inputs(module, 1), sequence_id=4242, sequence_start=True)
        error = _refused(client, module, sequence_id=4242, sequence_start=True)
        assert "already open" in error.message()
        # A request after the end.
        client.infer("acc", _inputs(module, 1), sequence_id=4242, sequence_end=True)
        error = _refused(client, module, sequence_id=4242)
        assert "sequence 4242 has ended" in error.message()
        # No sequence id at all.
        error = _refused(client, module)
        assert "must specify a non-zero or non-empty correlation ID" in error.message()
    finally:
        if client is not http_client:
            client.close()


def test_idle_sequences_expire_and_the_runtime_is_told(
    server: ServerProcess, http_client: Any
) -> None:
    sequence_id = f"idle-{os.getpid()}"
    result = http_client.infer(
        "acc-idle", _inputs(triton_http, 3), sequence_id=sequence_id, sequence_start=True
    )
    assert int(result.as_numpy("total")[0]) == 3
    wait_for(lambda: sequence_id in _ended(server, "acc-idle"), "the expiry's sequence_end")
    error = _refused(http_client, triton_http, model="acc-idle", sequence_id=sequence_id)
    assert f"sequence {sequence_id} expired" in error.message()
    assert f"max_sequence_idle_microseconds ({IDLE_MICROSECONDS})" in error.message()


def test_a_worker_that_dies_fails_its_open_sequences(server: ServerProcess, workers: int) -> None:
    if not workers:
        pytest.skip("needs worker processes")
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    try:
        result = client.infer("acc", _inputs(triton_grpc, 1), sequence_id=77, sequence_start=True)
        os.kill(int(result.as_numpy("pid")[0]), signal.SIGKILL)
        error = wait_for(
            lambda: _error_of(lambda: client.infer("acc", _inputs(triton_grpc, 1), sequence_id=77)),
            "the lost sequence's error",
        )
        assert "sequence 77" in error.message().lower() and "lost" in error.message()
        assert "worker process keeping its state" in error.message()
        # Started again, it runs (on the worker still alive, or the restarted one).
        result = client.infer("acc", _inputs(triton_grpc, 5), sequence_id=77, sequence_start=True)
        assert int(result.as_numpy("total")[0]) == 5
        client.infer("acc", _inputs(triton_grpc, 1), sequence_id=77, sequence_end=True)
    finally:
        client.close()


def _refused(client: Any, module: Any, model: str = "acc", **sequence: Any) -> Any:
    with pytest.raises(InferenceServerException) as caught:
        client.infer(model, _inputs(module, 1), **sequence)
    error = caught.value
    assert error.status() in ("400", "StatusCode.INVALID_ARGUMENT"), error
    return error


def _error_of(call: Any) -> InferenceServerException | None:
    try:
        call()
    except InferenceServerException as error:
        return error
    return None


def _ended(server: ServerProcess, model: str) -> set[str]:
    path = server.repository / model / "ended.txt"
    return set(path.read_text().split()) if path.exists() else set()
