"""The caller's deadline carried into the calls its model makes (model_calls.py), and
a cancelled call's cancel sent to its worker (workers/base.py Execution.sent)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import numpy as np
import pytest

from inferd import model_calls
from inferd.dispatch.batching import merge
from inferd.errors import DeadlineExceeded, ModelError
from inferd.types import InferenceRequest, Tensor
from inferd.workers import ipc
from inferd.workers.base import Execution


def request(**parameters: object) -> InferenceRequest:
    return InferenceRequest([Tensor("x", np.zeros((1, 2), np.float32))], parameters=parameters)


def test_a_timeout_becomes_a_deadline_keeping_an_earlier_one() -> None:
    timed = request(timeout=2_000_000)
    model_calls.note_deadline(timed)
    assert timed.deadline is not None
    assert 1.5 < timed.deadline - time.monotonic() <= 2.0
    earlier = request(timeout=5_000_000)
    earlier.deadline = time.monotonic() + 1
    model_calls.note_deadline(earlier)
    assert earlier.deadline - time.monotonic() <= 1.0
    for untimed in (request(), request(timeout=0), request(timeout="soon")):
        model_calls.note_deadline(untimed)
        assert untimed.deadline is None


def test_a_call_gets_what_is_left_as_its_timeout_unless_its_own_is_shorter() -> None:
    token = model_calls.serving(time.monotonic() + 1.0)
    try:
        call = model_calls._bounded(request())
        assert 500_000 < call.parameters["timeout"] <= 1_000_000
        assert call.deadline is not None
        own = model_calls._bounded(request(timeout=1000))
        assert own.parameters["timeout"] == 1000
    finally:
        model_calls.served(token)
    assert model_calls._bounded(request()).parameters == {}  # no deadline: as it was


def test_a_call_made_past_the_deadline_is_refused() -> None:
    token = model_calls.serving(time.monotonic() - 0.1)
    try:
        with pytest.raises(DeadlineExceeded, match="ran past its timeout"):
            model_calls._bounded(request())
    finally:
        model_calls.served(token)


def test_thread_calls_carry_the_deadline_into_their_thread() -> None:
    deadline = time.monotonic() + 3
    token = model_calls.serving(deadline)
    try:
        calls = model_calls.ThreadCalls()
    finally:
        model_calls.served(token)
    seen: list[float | None] = []
    thread = threading.Thread(target=calls.run, args=(lambda: seen.append(_current()),))
    thread.start()
    thread.join()
    assert seen == [deadline]


def _current() -> float | None:
    return model_calls._deadline.get()


def test_a_batch_ends_with_its_earliest_deadline_and_it_crosses_the_ipc() -> None:
    first, second, third = request(), request(), request()
    first.deadline, second.deadline = 20.0, 10.0
    batch = merge([first, second, third])
    assert batch.deadline == 10.0
    assert ipc.unpack_request(ipc.pack_request(batch)).deadline == 10.0
    assert ipc.unpack_request(ipc.pack_request(third)).deadline is None


def test_a_cancelled_awaiter_asks_the_worker_to_cancel_and_the_slot_waits_for_it() -> None:
    async def scenario() -> tuple[list[str], bool]:
        asked: list[str] = []
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        execution = Execution.sent(answer, lambda: asked.append("cancel"))
        freed: list[bool] = []
        execution.when_free(lambda: freed.append(True))
        waiting = asyncio.ensure_future(execution.result())
        await asyncio.sleep(0)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        still_taken = not freed
        answer.set_exception(ModelError("The request was cancelled: its client left"))
        await asyncio.sleep(0)
        return asked, still_taken and freed == [True]

    asked, slot_waited = asyncio.run(scenario())
    assert asked == ["cancel"]
    assert slot_waited
