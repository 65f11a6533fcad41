"""Triton's sequence stream examples (``simple_grpc_sequence_stream_infer_client.py``
and its asyncio twin) against 2 worker processes: three sequences on ONE gRPC stream,
two with integer ids (1000, 1001) and one with a uuid, every request sent without
waiting for an answer.

The model (testmodels.Accumulator) keeps a running sum per sequence in the process
that started it and fails a request of a sequence that process never started, so a
right total on every answer means each sequence stayed on one worker and ran in
order, as it does over unary calls.

A model without ``sequence_batching`` (Triton's examples' model as a Triton user
first writes it) keeps each sequence on one worker too, in every layout: the
sequence id picks the worker, for unary calls and streams alike. A Triton
Python-backend folder gets Triton's sequence batcher from its config.pbtxt.
"""

from __future__ import annotations

import asyncio
import queue
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.grpc.aio as triton_grpc_aio

from tests.support.models import TEST_RUNTIMES, add_custom_model, add_triton_model
from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess, start_server

MODEL = "simple_sequence"
# The example's values: each sequence starts with its own first value, then these
# (negated for the second and third sequences).
VALUES = [11, 7, 5, 3, 2, 0, 1]
Sequences = dict[int | str, list[int]]
Order = list[tuple[int | str, int]]  # (sequence id, step) of each request, as sent


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository: Path = tmp_path_factory.mktemp("triton-sequence-stream")
    add_custom_model(
        repository,
        MODEL,
        "Accumulator",
        threads_per_worker=2,
        sequence_batching={"max_sequence_idle_microseconds": 5_000_000},
        parameters={"extra": {"sleep": 0.005}},
    )
    add_custom_model(repository, "stateless", "Accumulator")  # no sequence_batching
    with start_server(repository, settings={"parallel_workers": 2}) as process:
        yield process


# Layouts of a server whose model has no sequence_batching: one protocol process with
# forked workers, three protocol processes (the model in the model host), spawned workers.
LAYOUTS = [
    pytest.param({}, id="forked"),
    pytest.param({"protocol_processes": 3}, id="3-protocol-processes"),
    pytest.param({"fork_workers": False}, id="spawned"),
]


@pytest.fixture(scope="module", params=LAYOUTS)
def unrouted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The example's model without sequence_batching, on 2 workers."""
    repository: Path = tmp_path_factory.mktemp("triton-sequence-stream-unrouted")
    add_custom_model(repository, MODEL, "Accumulator", parameters={"extra": {"sleep": 0.005}})
    with start_server(repository, settings={"parallel_workers": 2, **request.param}) as process:
        yield process


TRITON_SEQUENCE_PBTXT = """
sequence_batching { max_sequence_idle_microseconds: 5000000 direct { } }
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def triton_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The examples' model as a Triton Python-backend folder, sequence_batching in its
    config.pbtxt, two instances (worker processes)."""
    repository: Path = tmp_path_factory.mktemp("triton-sequence-folder")
    model_py = TEST_RUNTIMES.with_name("triton_accumulator.py")
    add_triton_model(repository, MODEL, TRITON_SEQUENCE_PBTXT, model_py)
    with start_server(repository, settings={"parallel_workers": 2}) as process:
        yield process


def _sequences() -> Sequences:
    """The example's three sequences: id -> the values it sends, in order."""
    negated = [-value for value in VALUES]
    return {1000: [0, *VALUES], 1001: [100, *negated], str(uuid.uuid4()): [20, *negated]}


def _requests(
    module: Any, sequences: Sequences, order: Order, name: str = "x", datatype: str = "INT64"
) -> Iterator[dict[str, Any]]:
    """The keyword arguments of each request, in ``order``; its one input ``name``."""
    for sequence_id, step in order:
        values = sequences[sequence_id]
        x = module.InferInput(name, [1], datatype)
        x.set_data_from_numpy(np.array([values[step]], dtype=f"{datatype.lower()}"))
        yield {
            "model_name": MODEL,
            "inputs": [x],
            "request_id": f"{sequence_id}_{step}",
            "sequence_id": sequence_id,
            "sequence_start": step == 0,
            "sequence_end": step == len(values) - 1,
        }


def _one_after_another(sequences: Sequences) -> Order:
    """As the example sends them: every request of a sequence, then the next sequence."""
    return [(sid, step) for sid, values in sequences.items() for step in range(len(values))]


def _round_robin(sequences: Sequences) -> Order:
    """One request of each sequence in turn: the three interleaved on the stream."""
    steps = len(next(iter(sequences.values())))
    return [(sid, step) for step in range(steps) for sid in sequences]


def _check_answers(answers: list[tuple[str, int, int]], sequences: Sequences, order: Order) -> None:
    """Every request answered once, in the order sent, with its sequence's running
    total so far; each sequence on one process, the three spread over both workers."""
    assert [answer_id for answer_id, _, _ in answers] == [f"{sid}_{step}" for sid, step in order]
    pids: dict[str, set[int]] = {}
    for answer_id, total, pid in answers:
        sequence_id, step = answer_id.rsplit("_", 1)
        values = next(v for sid, v in sequences.items() if str(sid) == sequence_id)
        assert total == sum(values[: int(step) + 1]), answer_id
        pids.setdefault(sequence_id, set()).add(pid)
    assert all(len(used) == 1 for used in pids.values()), pids
    assert len(set.union(*pids.values())) == 2, pids


def test_the_sync_clients_stream_keeps_each_sequence_on_its_worker(server: ServerProcess) -> None:
    """tritonclient.grpc: start_stream, then async_stream_infer for all 24 requests."""
    _sync_stream(server)


def test_without_sequence_batching_a_stream_keeps_each_sequence_on_one_worker(
    unrouted: ServerProcess,
) -> None:
    """The examples unchanged against a model without sequence_batching: each
    sequence's requests, sent over one stream without waiting, reach one worker (the
    regression: they alternated between the two, while unary calls stayed on one)."""
    _sync_stream(unrouted)
    asyncio.run(asyncio.wait_for(_aio_stream(unrouted, _round_robin), timeout=60))


def _sync_stream(server: ServerProcess) -> None:
    sequences = _sequences()
    order = _one_after_another(sequences)
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    try:
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        for request in _requests(triton_grpc, sequences, order):
            client.async_stream_infer(**request)
        answers = []
        for _ in order:
            result, error = received.get(timeout=30)
            assert error is None, str(error)
            answers.append(_answer(result))
    finally:
        client.stop_stream()
        client.close()
    _check_answers(answers, sequences, order)


@pytest.mark.parametrize("arrangement", [_one_after_another, _round_robin])
def test_the_asyncio_clients_stream_keeps_each_sequence_on_its_worker(
    server: ServerProcess, arrangement: Any
) -> None:
    """tritonclient.grpc.aio: stream_infer over an async iterator of the requests."""
    asyncio.run(asyncio.wait_for(_aio_stream(server, arrangement), timeout=60))


async def _aio_stream(server: ServerProcess, arrangement: Any) -> None:
    sequences = _sequences()
    order = arrangement(sequences)
    async with triton_grpc_aio.InferenceServerClient(server.grpc_address) as client:

        async def requests() -> AsyncIterator[dict[str, Any]]:
            for request in _requests(triton_grpc_aio, sequences, order):
                yield request

        answers = []
        async for result, error in client.stream_infer(requests()):
            assert error is None, str(error)
            answers.append(_answer(result))
            if len(answers) == len(order):
                break
    _check_answers(answers, sequences, order)


def _answer(result: Any) -> tuple[str, int, int]:
    return (
        result.get_response().id,
        int(result.as_numpy("total")[0]),
        int(result.as_numpy("pid")[0]),
    )


def test_unary_calls_and_a_stream_share_the_sequences(server: ServerProcess) -> None:
    """Sequences started by unary calls go on over a stream and end with unary calls:
    one routing for both, so every request of a sequence reaches its worker."""
    sequences = _sequences()
    first, middle, last = _split(sequences)
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    try:
        answers = [_answer(client.infer(**r)) for r in _requests(triton_grpc, sequences, first)]
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        for request in _requests(triton_grpc, sequences, middle):
            client.async_stream_infer(**request)
        for _ in middle:
            result, error = received.get(timeout=30)
            assert error is None, str(error)
            answers.append(_answer(result))
        client.stop_stream()
        answers += [_answer(client.infer(**r)) for r in _requests(triton_grpc, sequences, last)]
    finally:
        client.close()
    _check_answers(answers, sequences, first + middle + last)


def _split(sequences: Sequences) -> tuple[Order, Order, Order]:
    """The round-robin order cut in three: the first two steps of each sequence, the
    steps up to the last, and the last steps."""
    order = _round_robin(sequences)
    count = len(sequences)
    return order[: 2 * count], order[2 * count : -count], order[-count:]


def test_a_model_without_sequence_batching_that_gets_sequences_says_so_once(
    server: ServerProcess,
) -> None:
    """Nothing routes its sequences: the log says so (once), naming the fix."""
    client = triton_grpc.InferenceServerClient(server.grpc_address)
    try:
        totals = []
        for request in _requests(triton_grpc, {7: [1], 8: [2]}, [(7, 0), (8, 0)]):
            request["model_name"] = "stateless"
            totals.append(_answer(client.infer(**request))[1])
        assert totals == [1, 2]
    finally:
        client.close()
    warning = "Model 'stateless' got a request with a sequence_id but has no sequence_batching"
    wait_for(lambda: warning in server.log(), "the warning")
    assert server.log().count(warning) == 1
    assert 'Give its model-settings.json "sequence_batching": {}' in server.log()


def test_a_triton_folders_sequence_batching_keeps_each_sequence_on_its_instance(
    triton_folder: ServerProcess,
) -> None:
    """config.pbtxt's sequence_batching is Triton's sequence batcher here too: the
    example's three sequences over one stream, each on one instance, and the
    configuration reports the block."""
    sequences = _sequences()
    order = _round_robin(sequences)
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = triton_grpc.InferenceServerClient(triton_folder.grpc_address)
    try:
        config = client.get_model_config(MODEL, as_json=True)["config"]
        assert config["sequence_batching"]["max_sequence_idle_microseconds"] == "5000000"
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        for request in _requests(triton_grpc, sequences, order, "INPUT", "INT32"):
            client.async_stream_infer(**request)
        answers = []
        for _ in order:
            result, error = received.get(timeout=30)
            assert error is None, str(error)
            answers.append(
                (
                    result.get_response().id,
                    int(result.as_numpy("OUTPUT")[0]),
                    int(result.as_numpy("PID")[0]),
                )
            )
    finally:
        client.stop_stream()
        client.close()
    _check_answers(answers, sequences, order)
