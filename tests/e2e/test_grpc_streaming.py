"""gRPC ModelStreamInfer as Triton's decoupled mode, driven by tritonclient.grpc.

A real server (``parallel_workers`` 0 and 2) with streaming models: each response
arrives as the model yields it, with the final flag when asked, errors keep the
stream going, requests interleave, and cancelling the stream stops the models.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from tests.support.polling import wait_for
from tests.support.serverproc import ServerProcess

TIMEOUT = 30.0
FINAL = "triton_final_response"

Answer = tuple[Any, InferenceServerException | None]


class Stream:
    """A tritonclient stream whose callback puts every answer in a queue."""

    def __init__(self, streaming_server: ServerProcess) -> None:
        self.client = triton.InferenceServerClient(streaming_server.grpc_address)
        self.answers: queue.Queue[Answer] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.answers.put((result, error)))

    def send(self, model: str, request_id: str, final: bool = False, **parameters: Any) -> None:
        x = triton.InferInput("x", [1], "FP32")
        x.set_data_from_numpy(np.array([1.0], dtype=np.float32))
        self.client.async_stream_infer(
            model,
            [x],
            request_id=request_id,
            parameters=parameters or None,
            enable_empty_final_response=final,
        )

    def receive(self, count: int) -> list[Answer]:
        return [self.answers.get(timeout=TIMEOUT) for _ in range(count)]

    def close(self, cancel: bool = False) -> list[Answer]:
        """Stop the stream (after every answer, unless cancelled); what was left."""
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()
        left = []
        while not self.answers.empty():
            left.append(self.answers.get_nowait())
        return left


@pytest.fixture
def stream(streaming_server: ServerProcess) -> Iterator[Stream]:
    opened = Stream(streaming_server)
    yield opened
    opened.close(cancel=True)


def summary(answer: Answer) -> tuple[str, Any, bool | None]:
    """(id, the index output or the error's message, the final flag if set)."""
    result, error = answer
    if error is not None:
        return ("?", error.message(), None)
    response = result.get_response()
    flag = response.parameters[FINAL].bool_param if FINAL in response.parameters else None
    index = result.as_numpy("index")
    return (response.id, None if index is None else int(index[0]), flag)


@pytest.mark.parametrize("model", ["tokens", "thread-tokens"])
def test_every_response_arrives_in_order_then_the_empty_final(stream: Stream, model: str) -> None:
    stream.send(model, "a", final=True, count=4)
    answers = stream.receive(5)
    assert [summary(answer) for answer in answers] == [
        ("a", 0, False),
        ("a", 1, False),
        ("a", 2, False),
        ("a", 3, False),
        ("a", None, True),
    ]
    first = answers[0][0]
    assert first.as_numpy("text_output").tolist() == [b"tok0"]
    final = answers[-1][0].get_response()
    assert (final.model_name, final.model_version, final.id) == (model, "", "a")
    assert not final.outputs and not final.raw_output_contents


def test_without_the_flag_there_is_no_final_response(stream: Stream) -> None:
    stream.send("tokens", "b", count=2)
    assert [summary(answer) for answer in stream.receive(2)] == [("b", 0, None), ("b", 1, None)]
    assert stream.close() == []


def test_an_error_ends_its_request_and_the_stream_goes_on(stream: Stream) -> None:
    stream.send("tokens", "c", final=True, count=3, fail_at=1)
    stream.send("tokens", "d", count=1)
    answers = [summary(answer) for answer in stream.receive(4)]
    # c and d run at once (on two workers, d may well answer first): each in its order.
    assert [answer for answer in answers if answer[0] != "d"] == [
        ("c", 0, False),
        ("?", "Model 'tokens' failed: ValueError: the stream broke at 1", None),
        ("c", None, True),
    ]
    assert ("d", 0, None) in answers


def test_two_requests_interleave_on_one_stream(stream: Stream) -> None:
    stream.send("tokens", "e", count=4, delay_ms=100)
    stream.send("thread-tokens", "f", count=4, delay_ms=100)
    ids = [summary(answer)[0] for answer in stream.receive(8)]
    assert sorted(ids) == ["e"] * 4 + ["f"] * 4
    # Each request's responses came as they were made, not one request after the other.
    assert ids.index("f") < len(ids) - 1 - ids[::-1].index("e"), ids


def test_answers_of_models_that_do_not_stream_keep_their_order(stream: Stream) -> None:
    stream.send("tokens", "slow", count=3, delay_ms=200)
    for index in range(10):
        stream.send("double", str(index))
    answers = [summary(answer) for answer in stream.receive(13)]
    unary = [request_id for request_id, _, _ in answers if request_id != "slow"]
    assert unary == [str(index) for index in range(10)]
    # ... and do not wait for the stream beside them.
    assert answers[-1][0] == "slow"


@pytest.mark.parametrize("model", ["tokens", "thread-tokens"])
def test_cancelling_the_stream_stops_the_generator(
    streaming_server: ServerProcess, streaming_repository: Path, model: str
) -> None:
    stream = Stream(streaming_server)
    request_id = f"cancelled-{model}"
    stopped = streaming_repository / model / f"stopped-{request_id}"
    stream.send(model, request_id, count=100_000, delay_ms=10)
    stream.receive(2)
    stream.close(cancel=True)
    wait_for(stopped.exists, "the model's generator to stop", 5)
