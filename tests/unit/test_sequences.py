"""The sequence table (Triton's sequence batching rules), on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from inferd.dispatch.sequences import SequenceControl, SequenceTable, sequence_control
from inferd.errors import InvalidRequest

WORKER_A = (0, 1)
WORKER_B = (1, 1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def table(clock: Clock) -> SequenceTable:
    return SequenceTable("acc", idle_timeout=1.0, clock=clock)


def start(sequence_id: int | str, end: bool = False) -> SequenceControl:
    return SequenceControl(sequence_id, True, end)


def step(sequence_id: int | str, end: bool = False) -> SequenceControl:
    return SequenceControl(sequence_id, False, end)


def run(table: SequenceTable, control: SequenceControl, holder: Any = WORKER_A) -> Any:
    """Admit, start and finish one request; the sequence, and whether it closed."""
    sequence = table.admit(control, lambda: holder)
    table.started(sequence)
    return sequence, table.finished(sequence)


# Reading the parameters


def test_parameters_as_tritonclient_sends_them() -> None:
    control = sequence_control(
        {"sequence_id": 7, "sequence_start": True, "sequence_end": False}, "m"
    )
    assert control == SequenceControl(7, True, False)
    assert sequence_control({"sequence_id": "chat-1"}, "m") == SequenceControl(
        "chat-1", False, False
    )


@pytest.mark.parametrize("parameters", [{}, {"sequence_id": 0}, {"sequence_id": ""}])
def test_a_request_without_a_sequence_is_refused_in_tritons_words(parameters: Any) -> None:
    with pytest.raises(InvalidRequest, match="model 'm' must specify a non-zero or non-empty"):
        sequence_control(parameters, "m")


@pytest.mark.parametrize("value", [-1, 2**64, 1.5, True, [1]])
def test_a_sequence_id_must_be_a_uint64_or_a_string(value: Any) -> None:
    with pytest.raises(InvalidRequest, match="'sequence_id' must be a whole number from 1"):
        sequence_control({"sequence_id": value}, "m")


def test_flags_must_be_booleans() -> None:
    with pytest.raises(InvalidRequest, match="'sequence_end' must be true or false, not 1"):
        sequence_control({"sequence_id": 3, "sequence_end": 1}, "m")


# Opening, continuing, ending


def test_a_sequence_stays_on_the_holder_it_was_placed_on(table: SequenceTable) -> None:
    first, _ = run(table, start(1), WORKER_B)
    later, closed = run(table, step(1), WORKER_A)  # place() is not asked again
    assert later is first and later.holder == WORKER_B and not closed
    assert table.open_on(WORKER_B) == 1 and table.open_on(WORKER_A) == 0


def test_the_end_request_closes_it_once_it_has_run(table: SequenceTable) -> None:
    run(table, start(1))
    sequence = table.admit(step(1, end=True), lambda: WORKER_A)
    with pytest.raises(InvalidRequest, match="came after the request that ends it"):
        table.admit(step(1), lambda: WORKER_A)
    table.started(sequence)
    assert table.get(1) is sequence  # still open while its end runs
    assert table.finished(sequence) is True
    assert table.get(1) is None and table.open_on(WORKER_A) == 0
    with pytest.raises(InvalidRequest, match=r"START flag .*\(sequence 1 has ended\)"):
        table.admit(step(1), lambda: WORKER_A)


def test_a_single_request_sequence(table: SequenceTable) -> None:
    _, closed = run(table, start("one", end=True))
    assert closed and len(table) == 0


def test_unknown_sequences_are_refused_with_tritons_words(table: SequenceTable) -> None:
    with pytest.raises(InvalidRequest) as caught:
        table.admit(step(9), lambda: WORKER_A)
    assert caught.value.message == (
        "inference request for sequence 9 to model 'acc' must specify the START flag on the "
        "first request of the sequence (sequence 9 is not open)"
    )


def test_a_second_start_of_an_open_sequence_is_refused(table: SequenceTable) -> None:
    run(table, start(1))
    with pytest.raises(
        InvalidRequest, match="has the START flag, but that sequence is already open"
    ):
        table.admit(start(1), lambda: WORKER_A)
    run(table, step(1, end=True))
    run(table, start(1))  # once ended, the id may start again


def test_ids_of_different_types_are_different_sequences(table: SequenceTable) -> None:
    run(table, start(1))
    run(table, start("1"))
    assert len(table) == 2


# Expiry


def test_idle_sequences_expire_after_the_timeout(table: SequenceTable, clock: Clock) -> None:
    run(table, start(1))
    clock.now += 0.5
    run(table, start(2))
    assert table.next_expiry() == pytest.approx(101.0)
    clock.now += 0.5
    assert [s.sequence_id for s in table.expire()] == [1]
    assert table.next_expiry() == pytest.approx(101.5)
    with pytest.raises(InvalidRequest, match=r"sequence 1 expired: .*\(1000000\)"):
        table.admit(step(1), lambda: WORKER_A)
    clock.now += 0.5
    assert [s.sequence_id for s in table.expire()] == [2]
    assert table.next_expiry() is None


def test_sequences_with_requests_queued_or_running_never_expire(
    table: SequenceTable, clock: Clock
) -> None:
    run(table, start(1))
    queued = table.admit(step(1), lambda: WORKER_A)
    clock.now += 5
    assert table.expire() == [] and table.next_expiry() is None
    table.started(queued)
    clock.now += 5
    assert table.expire() == []
    table.finished(queued)
    clock.now += 0.999
    assert table.expire() == []
    clock.now += 0.001
    assert table.expire() == [queued]


# Losing a holder, withdrawn requests


def test_a_dead_holder_loses_its_sequences(table: SequenceTable) -> None:
    run(table, start(1), WORKER_A)
    run(table, start(2), WORKER_B)
    lost = table.lose({WORKER_B}, "its worker stopped")
    assert [s.sequence_id for s in lost] == [1]
    with pytest.raises(InvalidRequest, match=r"\(sequence 1 was lost: its worker stopped\)"):
        table.admit(step(1), lambda: WORKER_A)
    assert table.get(2) is not None


def test_a_withdrawn_start_that_never_ran_leaves_no_sequence(table: SequenceTable) -> None:
    sequence = table.admit(start(5), lambda: WORKER_A)
    table.withdrawn(sequence, ends=False)
    assert table.get(5) is None
    run(table, start(5))  # the client may start it again


def test_a_withdrawn_end_leaves_the_sequence_open(table: SequenceTable) -> None:
    run(table, start(5))
    sequence = table.admit(step(5, end=True), lambda: WORKER_A)
    table.withdrawn(sequence, ends=True)
    assert table.get(5) is sequence and not sequence.ending
    run(table, step(5))


def test_closed_reasons_are_remembered_within_a_bound(clock: Clock) -> None:
    table = SequenceTable("acc", 1.0, clock, remembered=2)
    for sequence_id in (1, 2, 3):
        run(table, start(sequence_id, end=True))
    with pytest.raises(InvalidRequest, match=r"\(sequence 1 is not open\)"):
        table.admit(step(1), lambda: WORKER_A)
    with pytest.raises(InvalidRequest, match=r"\(sequence 3 has ended\)"):
        table.admit(step(3), lambda: WORKER_A)
