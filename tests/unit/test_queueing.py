"""The queue policy with a fake clock: priorities, bounds, deadlines, batch forming."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.dispatch.batch_policy import AdaptiveBatching, BatchPolicy, NoBatching
from inferd.dispatch.queueing import Pending, QueuePolicy, RequestQueue, queue_bound
from inferd.errors import InvalidRequest, Overloaded
from inferd.settings import ModelSettings
from inferd.types import InferenceRequest, Tensor


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(rows: int, id: str, width: int = 3, **parameters: object) -> InferenceRequest:
    data = np.zeros((rows, width), dtype=np.float32)
    return InferenceRequest(inputs=[Tensor("x", data)], id=id, parameters=dict(parameters))


def make_queue(
    clock: FakeClock, max_batch_rows: int = 0, max_batch_time: float = 0.0, **policy: object
) -> RequestQueue:
    batch_policy: BatchPolicy = NoBatching()
    if max_batch_rows > 1:
        batch_policy = AdaptiveBatching(max_batch_rows, max_batch_time, clock)
    return RequestQueue(QueuePolicy(**policy), batch_policy, "model 'm'", clock)  # type: ignore[arg-type]


def next_ids(queue: RequestQueue, in_flight: int) -> list[str | None]:
    batch, held_until = queue.next_batch(in_flight)
    assert held_until is None, "the batch was held"
    return ids(batch)


def push(queue: RequestQueue, *requests: InferenceRequest) -> list[Pending]:
    pendings = [queue.pending(r) for r in requests]
    for pending in pendings:
        queue.push(pending)
    return pendings


def ids(batch: list[Pending]) -> list[str | None]:
    return [pending.request.id for pending in batch]


def test_batches_count_rows_and_never_exceed_the_limit() -> None:
    queue = make_queue(FakeClock(), max_batch_rows=12)
    push(queue, request(1, "a"), request(10, "b"), request(5, "c"), request(1, "d"))
    assert next_ids(queue, in_flight=0) == ["a", "b", "d"]  # 12 rows; c does not fit
    assert next_ids(queue, in_flight=0) == ["c"]
    assert len(queue) == 0


def test_a_request_larger_than_the_limit_runs_alone() -> None:
    queue = make_queue(FakeClock(), max_batch_rows=4)
    push(queue, request(9, "big"), request(1, "small"))
    assert next_ids(queue, in_flight=0) == ["big"]
    assert next_ids(queue, in_flight=0) == ["small"]


def test_without_batching_requests_leave_one_at_a_time_in_order() -> None:
    queue = make_queue(FakeClock(), max_batch_rows=0)
    push(queue, request(1, "a"), request(1, "b"))
    assert next_ids(queue, in_flight=3) == ["a"]
    assert next_ids(queue, in_flight=3) == ["b"]


def test_mixed_shapes_go_in_different_batches_in_arrival_order() -> None:
    queue = make_queue(FakeClock(), max_batch_rows=32)
    push(queue, request(1, "a"), request(1, "wide", width=4), request(2, "b"))
    assert next_ids(queue, in_flight=0) == ["a", "b"]
    assert next_ids(queue, in_flight=0) == ["wide"]


def test_a_partial_batch_waits_for_company_only_while_the_server_is_busy() -> None:
    clock = FakeClock()
    queue = make_queue(clock, max_batch_rows=4, max_batch_time=0.01)
    push(queue, request(1, "a"))
    batch, held_until = queue.next_batch(in_flight=1)  # busy: wait for company
    assert batch == [] and held_until == pytest.approx(100.01)
    push(queue, request(1, "b"))
    clock.now += 0.01
    assert next_ids(queue, in_flight=1) == ["a", "b"]  # waited max_batch_time
    push(queue, request(1, "c"))
    assert next_ids(queue, in_flight=0) == ["c"]  # idle: at once
    push(queue, request(2, "d"), request(2, "e"))
    assert next_ids(queue, in_flight=1) == ["d", "e"]  # full: at once


def test_priority_one_is_highest_and_fifo_holds_within_a_level() -> None:
    queue = make_queue(FakeClock(), default_priority_level=2)
    push(
        queue,
        request(1, "default-1"),
        request(1, "low", priority=3),
        request(1, "high-1", priority=1),
        request(1, "default-2", priority=0),
        request(1, "high-2", priority=1),
    )
    order = [next_ids(queue, in_flight=0)[0] for _ in range(5)]
    assert order == ["high-1", "high-2", "default-1", "default-2", "low"]


def test_lower_priority_requests_fill_the_room_left_in_a_batch() -> None:
    queue = make_queue(FakeClock(), max_batch_rows=3)
    push(queue, request(1, "low", priority=5), request(1, "high", priority=1))
    assert next_ids(queue, in_flight=0) == ["high", "low"]


def test_a_full_queue_refuses_at_once() -> None:
    queue = make_queue(FakeClock(), max_size=2)
    push(queue, request(1, "a"), request(1, "b"))
    with pytest.raises(Overloaded, match=r"queue of model 'm' is full.*max_queue_size"):
        push(queue, request(1, "c"))
    assert len(queue) == 2


def test_a_model_without_a_bound_of_its_own_gets_the_servers() -> None:
    assert queue_bound(None, 1024) == (1024, "settings.json (for every model)")
    assert queue_bound(None, 0) == (0, "settings.json (for every model)")


def test_a_models_own_bound_wins_and_zero_means_unbounded() -> None:
    assert queue_bound(8, 1024) == (8, "its model-settings.json")
    assert queue_bound(0, 1024) == (0, "its model-settings.json")
    assert queue_bound(4096, 16) == (4096, "its model-settings.json")


def test_the_policy_takes_the_bound_from_where_it_is_set() -> None:
    unset, unbounded = ModelSettings(name="m"), ModelSettings(name="m", max_queue_size=0)
    assert QueuePolicy.of(unset, 64).max_size == 64
    assert QueuePolicy.of(unbounded, 64).max_size == 0
    assert QueuePolicy.of(None, 64).max_size == 64
    assert QueuePolicy.of(unset).max_size == 0, "no server bound given: none"


def test_a_full_queue_names_the_file_its_bound_comes_from() -> None:
    policy = QueuePolicy.of(ModelSettings(name="m"), 1)
    queue = RequestQueue(policy, NoBatching(), "model 'm'", FakeClock())
    push(queue, request(1, "a"))
    with pytest.raises(
        Overloaded, match=r"\(1 requests waiting\).*max_queue_size in settings.json"
    ):
        push(queue, request(1, "b"))


def test_expired_requests_leave_the_queue_and_never_join_a_batch() -> None:
    clock = FakeClock()
    queue = make_queue(clock, timeout=1.0)
    push(queue, request(1, "default"), request(1, "short", timeout=500_000))  # 0.5 s
    push(queue, request(1, "none", timeout=0))
    clock.now += 0.6
    assert ids(queue.pop_expired()) == ["short"]
    clock.now += 0.5
    assert ids(queue.pop_expired()) == ["default"]
    assert next_ids(queue, in_flight=0) == ["none"]
    assert queue.pop_expired() == []


def test_removed_requests_are_gone() -> None:
    queue = make_queue(FakeClock(), max_batch_rows=8)
    a, _ = push(queue, request(1, "a"), request(1, "b"))
    assert queue.remove(a)
    assert not queue.remove(a)
    assert next_ids(queue, in_flight=0) == ["b"]
    assert len(queue) == 0


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"priority": -1}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"timeout": "1s"}, "timeout"),
        # NaN passes "< 0" and "or None" checks, then breaks the timer: refused first.
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
    ],
)
def test_bad_queue_parameters_are_refused_clearly(parameters: dict, message: str) -> None:
    queue = make_queue(FakeClock())
    with pytest.raises(InvalidRequest, match=message):
        queue.pending(request(1, "a", **parameters))
