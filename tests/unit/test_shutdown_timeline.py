"""When the drain cuts what still runs, and when the servers and the close stop
waiting (shutdown.py): all before the grace period ends, in that order."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from inferd.runtimes.common import release_idle_step_threads, stepped_in_thread
from inferd.server.shutdown import (
    Shutdown,
    close_ends_after,
    cut_after,
    model_threads_running,
    servers_stop_after,
)
from tests.support.polling import wait_for_async


@pytest.mark.parametrize(
    ("grace", "cut", "servers_stop", "close_ends"),
    [
        (25.0, 23.0, 23.5, 24.0),  # the default: two seconds kept after the cut
        (3.0, 2.0, 2.25, 2.5),  # a short grace keeps a third of it
        (0.3, 0.2, 0.225, 0.25),
    ],
)
def test_the_cut_the_servers_and_the_close_end_before_the_grace_period(
    grace: float, cut: float, servers_stop: float, close_ends: float
) -> None:
    assert cut_after(grace) == pytest.approx(cut)
    assert servers_stop_after(grace) == pytest.approx(servers_stop)
    assert close_ends_after(grace) == pytest.approx(close_ends)


@pytest.mark.anyio
@pytest.mark.parametrize(("same_stop_seconds", "hurried"), [(0.0, True), (60.0, False)])
async def test_a_signal_repeated_within_the_same_stop_window_does_not_cut(
    same_stop_seconds: float, hurried: bool
) -> None:
    """A protocol process gets SIGTERM from the supervisor and from a service manager
    that signals the group: within ``same_stop_seconds`` that is one stop, not the
    second signal that stops requests at once."""
    calls: list[str] = []
    shutdown = Shutdown(_NoDrain(), 1000.0, lambda: None, same_stop_seconds)
    shutdown.begin = lambda why, at=None: calls.append("begin")  # type: ignore[method-assign]
    shutdown.hurry = lambda why, at=None: calls.append("hurry")  # type: ignore[method-assign]
    shutdown.install_signal_handlers((signal.SIGUSR1,))
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        await wait_for_async(lambda: len(calls) >= (2 if hurried else 1), "the signals handled")
        await asyncio.sleep(0.05)  # a wrongly scheduled call would land by now
    finally:
        shutdown.restore_signal_handlers()
        shutdown.finished()
    assert calls == (["begin", "hurry"] if hurried else ["begin"])


class _NoDrain:
    def close(self) -> None:
        pass


@pytest.mark.anyio
async def test_stream_step_threads_left_idle_do_not_read_as_model_code_running() -> None:
    """A stepped stream (a plain generator run a step at a time in a thread) leaves its
    pool's threads idle but alive: the stop lets them go, instead of taking them for
    model code still running and exiting 1 (not drained)."""
    steps = [item async for item in stepped_in_thread(iter([1, 2]), asyncio.Semaphore(1))]
    assert steps == [1, 2]
    assert any(thread.name.startswith("inferd-stream-step") for thread in threading.enumerate())
    release_idle_step_threads()
    assert model_threads_running() == []
