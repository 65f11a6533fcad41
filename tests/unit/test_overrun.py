"""The inference timer's bookkeeping, on a fake clock and a fake event-loop timer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from inferd.workers.overrun import EARLY_FIRING, InferenceTimer


@dataclass
class FakeTimer:
    at: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeLoop:
    """A clock the test moves, and the timers set on it."""

    now: float = 100.0
    timers: list[FakeTimer] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self.now + delay, callback)
        self.timers.append(timer)
        return timer

    @property
    def armed(self) -> list[float]:
        return [timer.at for timer in self.timers if not timer.cancelled]

    def advance_to(self, when: float) -> None:
        """Move the clock, firing each timer due by then (as the loop would)."""
        while True:
            due = [t for t in self.timers if not t.cancelled and t.at <= when]
            if not due:
                break
            timer = min(due, key=lambda t: t.at)
            self.timers.remove(timer)
            self.now = max(self.now, timer.at)
            timer.callback()
        self.now = when


def timer_on(loop: FakeLoop) -> tuple[InferenceTimer[str], list[str]]:
    overran: list[str] = []
    return InferenceTimer(overran.append, loop.clock, loop.call_later), overran


def test_one_timer_at_the_oldest_calls_deadline_and_only_calls_past_it_overrun() -> None:
    loop = FakeLoop()
    timer, overran = timer_on(loop)
    timer.started("a1", 1, 2.0)
    loop.now = 100.5
    timer.started("a2", 1, 2.0)
    timer.started("a3", 1, 2.0)
    assert loop.armed == [102.0], "one timer, at the oldest call's deadline"

    timer.finished("a1", 1)
    assert loop.armed == [102.0], "an answered call leaves the timer alone"
    loop.advance_to(102.0)
    assert overran == [] and loop.armed == [102.5], "it looks again at the oldest then"
    loop.advance_to(103.0)
    assert overran == ["a2", "a3"] and loop.armed == []


def test_a_shorter_limit_sets_the_timer_earlier_and_each_model_keeps_its_own() -> None:
    loop = FakeLoop()
    timer, overran = timer_on(loop)
    timer.started("slow", 1, 10.0)
    timer.started("quick", 2, 1.0)
    assert loop.armed == [101.0] and loop.timers[0].cancelled
    loop.advance_to(101.0)
    assert overran == ["quick"] and loop.armed == [110.0]
    timer.finished("slow", 1)
    loop.advance_to(110.0)
    assert overran == ["quick"] and loop.armed == [], "nothing left: no timer"


def test_a_timer_firing_a_hair_early_counts_the_call_as_past_its_deadline() -> None:
    loop = FakeLoop()
    timer, overran = timer_on(loop)
    timer.started("a", 1, 1.0)
    loop.timers[0].at -= EARLY_FIRING / 2  # as uvloop's millisecond timers may
    loop.advance_to(101.0 - EARLY_FIRING / 2)
    assert overran == ["a"]


def test_a_call_started_after_an_idle_spell_arms_the_timer_again_and_close_disarms() -> None:
    loop = FakeLoop()
    timer, overran = timer_on(loop)
    timer.started("a", 1, 1.0)
    timer.finished("a", 1)
    loop.advance_to(101.0)
    assert loop.armed == [] and overran == []
    timer.started("b", 1, 1.0)
    assert loop.armed == [102.0]
    timer.close()
    assert loop.armed == []
    loop.advance_to(103.0)
    assert overran == []


def test_what_overrun_does_may_start_calls_again() -> None:
    loop = FakeLoop()
    calls: list[str] = []

    def restart_call(call: str) -> None:
        calls.append(call)
        timer.started(call + "'", 1, 1.0)  # e.g. a retried request sent again

    timer: InferenceTimer[str] = InferenceTimer(restart_call, loop.clock, loop.call_later)
    timer.started("a", 1, 1.0)
    loop.advance_to(101.0)
    assert calls == ["a"] and loop.armed == [102.0]
    loop.advance_to(102.0)
    assert calls == ["a", "a'"]
