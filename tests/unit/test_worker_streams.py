"""A worker's streams, without a process: a worker's event loop in a thread, the
replies it would send collected in a queue. Credit, cancel, errors, for plain and
async generators."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

from inferd import custom_metrics
from inferd.errors import ModelError
from inferd.model import Model
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, InferenceResponse, Tensor
from inferd.workers import ipc, messages
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.worker_streams import WorkerStreams
from tests.support.polling import wait_for

DEADLINE = 10.0


def response(index: int) -> InferenceResponse:
    return InferenceResponse([Tensor("i", np.array([index]))])


class Recorder:
    """What a generator did: how many it yielded, and whether its ``finally`` ran."""

    def __init__(self) -> None:
        self.yielded = 0
        self.closed = threading.Event()
        self.thread = ""


class Plain(Model):
    recorder = Recorder()

    def predict_stream(self, request: InferenceRequest) -> Iterator[InferenceResponse]:
        recorder = self.recorder
        recorder.thread = threading.current_thread().name
        try:
            for index in range(int(request.parameters.get("n", 1000))):
                if index == request.parameters.get("fail_at"):
                    raise ValueError("boom")
                recorder.yielded += 1
                yield response(index)
        finally:
            recorder.closed.set()


class Async(Model):
    recorder = Recorder()

    async def predict_stream(  # type: ignore[override]
        self, request: InferenceRequest
    ) -> AsyncIterator[InferenceResponse]:
        recorder = self.recorder
        try:
            for index in range(int(request.parameters.get("n", 1000))):
                if index == request.parameters.get("fail_at"):
                    raise ValueError("boom")
                if index == request.parameters.get("wait_at"):
                    await asyncio.sleep(60)
                recorder.yielded += 1
                yield response(index)
        finally:
            recorder.closed.set()


class NotAGenerator(Model):
    def predict_stream(self, request: InferenceRequest) -> Any:
        return [response(0)]


class Harness:
    """A worker's loop thread and WorkerStreams; replies land in ``replies``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.replies: queue.Queue[messages.Reply] = queue.Queue()
        self._decoder: ipc.FrameDecoder[messages.Reply] = ipc.FrameDecoder()
        self._lock = threading.Lock()
        self.streams = WorkerStreams(self.loop, self.send, self.reply_error)

    def send(self, pieces: list[ipc.Buffer]) -> None:
        data = b"".join(bytes(piece) for piece in pieces)
        with self._lock:
            self._decoder.get_buffer()[: len(data)] = data
            for reply in self._decoder.buffer_updated(len(data)):
                self.replies.put(reply)

    def reply_error(self, call_id: int, error: BaseException) -> None:
        self.replies.put((messages.ERROR, call_id, ipc.error_to_wire(error)))

    def next_reply(self) -> messages.Reply:
        return self.replies.get(timeout=DEADLINE)

    def nothing_more(self) -> bool:
        return self.replies.empty()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(DEADLINE)
        self.loop.close()


@pytest.fixture
def harness() -> Iterator[Harness]:
    made = Harness()
    yield made
    made.streams.cancel_all()
    made.close()


def loaded(runtime: type[Model], threads: int = 1) -> LoadedModel:
    name = runtime.__name__
    settings = ModelSettings(name=name, implementation="x.Y", threads_per_worker=threads)
    runtime.recorder = Recorder()  # type: ignore[attr-defined]
    return LoadedModel.of(runtime(settings), custom_metrics.model_labels(name, None))


def request(**parameters: Any) -> InferenceRequest:
    return InferenceRequest([Tensor("x", np.zeros(1))], parameters=parameters)


def sent(harness: Harness, count: int) -> list[int]:
    """The indexes of the next ``count`` responses sent (several may share a message)."""
    got: list[int] = []
    while len(got) < count:
        kind, _, body = harness.next_reply()
        assert kind == messages.STREAMED
        got += [int(ipc.unpack_response(packed).outputs[0].data[0]) for packed in body]
    return got


@pytest.mark.parametrize("runtime", [Plain, Async])
def test_it_runs_only_as_far_as_its_credit_and_on_with_each_grant(
    harness: Harness, runtime: type[Model]
) -> None:
    model = loaded(runtime)
    recorder: Recorder = runtime.recorder  # type: ignore[attr-defined]
    harness.streams.start(7, model, request(n=10), credit=3)
    assert sent(harness, 3) == [0, 1, 2]
    harness.streams.grant(7, 2)
    assert sent(harness, 2) == [3, 4]
    assert recorder.yielded == 5 and harness.nothing_more(), "it waits for credit"
    harness.streams.grant(7, 100)
    assert sent(harness, 5) == [5, 6, 7, 8, 9]
    assert harness.next_reply() == (messages.ENDED, 7, None)
    assert recorder.closed.is_set() and len(harness.streams) == 0
    if runtime is Plain:
        assert recorder.thread.startswith("inferd-Plain-stream"), "a thread of its own"


@pytest.mark.parametrize("runtime", [Plain, Async])
def test_a_cancel_while_it_waits_for_credit_stops_the_generator_then_says_ended(
    harness: Harness, runtime: type[Model]
) -> None:
    model = loaded(runtime)
    recorder: Recorder = runtime.recorder  # type: ignore[attr-defined]
    harness.streams.start(3, model, request(), credit=2)
    assert sent(harness, 2) == [0, 1]
    harness.streams.cancel(3)
    assert harness.next_reply() == (messages.ENDED, 3, None)
    assert recorder.closed.is_set() and recorder.yielded == 2
    harness.streams.cancel(3)  # it ended: nothing happens
    harness.streams.grant(3, 5)
    assert len(harness.streams) == 0


def test_a_cancel_stops_an_async_generator_where_it_awaits(harness: Harness) -> None:
    model = loaded(Async)
    harness.streams.start(1, model, request(wait_at=1), credit=16)
    assert sent(harness, 1) == [0]
    harness.streams.cancel(1)  # it sleeps for a minute: the sleep is cancelled
    assert harness.next_reply() == (messages.ENDED, 1, None)
    assert Async.recorder.closed.is_set()


@pytest.mark.parametrize("runtime", [Plain, Async])
def test_the_models_error_follows_what_it_yielded_before(
    harness: Harness, runtime: type[Model]
) -> None:
    harness.streams.start(5, loaded(runtime), request(fail_at=3), credit=16)
    assert sent(harness, 3) == [0, 1, 2]
    kind, call_id, wire = harness.next_reply()
    error = ipc.error_from_wire(wire)
    assert (kind, call_id) == (messages.ERROR, 5)
    assert isinstance(error, ModelError) and "boom" in str(error)
    assert len(harness.streams) == 0


def test_a_predict_stream_that_is_not_a_generator_is_an_error(harness: Harness) -> None:
    harness.streams.start(2, loaded(NotAGenerator), request(), credit=16)
    kind, call_id, wire = harness.next_reply()
    assert (kind, call_id) == (messages.ERROR, 2)
    assert "not a generator" in str(ipc.error_from_wire(wire))


def test_streams_run_side_by_side_in_the_models_threads(harness: Harness) -> None:
    model = loaded(Plain, threads=2)
    harness.streams.start(1, model, request(n=3), credit=1)
    harness.streams.start(2, model, request(n=3), credit=1)
    first = [harness.next_reply() for _ in range(2)]
    assert sorted(call_id for _, call_id, _ in first) == [1, 2], "both run at once"
    harness.streams.cancel_all()
    ends = {harness.next_reply() for _ in range(2)}
    assert ends == {(messages.ENDED, 1, None), (messages.ENDED, 2, None)}
    wait_for(lambda: len(harness.streams) == 0, "len(harness.streams) == 0", timeout=DEADLINE)
