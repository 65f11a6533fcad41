"""The drain: what happens from the first SIGTERM (or SIGINT) to the exit.

With ``G`` = ``shutdown_grace_seconds``, counted from the signal:

- At once: readiness turns false (REST ``/v2/health/ready`` answers 503 until
  its listening socket closes a moment later; gRPC refuses new calls, probes'
  ``ServerReady`` and health ``Check`` included, and an open health ``Watch``
  gets NOT_SERVING), and an inference request that still reaches the server
  gets 503 / UNAVAILABLE (:mod:`inferd.serving.drain`). Every request already admitted
  (queued, running, streaming) goes on and is answered.
- At ``G`` minus a reserve (:func:`cut_after`): the requests still running are
  stopped (the cut): each fails with ShuttingDown, so a REST request gets a 503,
  an SSE stream a last ``event: error``, a gRPC request UNAVAILABLE, a gRPC stream
  an ``error_message`` per open request and then UNAVAILABLE. The log says how
  many were stopped.
- A quarter through the reserve the servers stop waiting for their connections;
  models are unloaded and the workers stopped, until halfway through it (a
  worker still busy then is killed with the process); it exits with status 0.
  The rest of the reserve is for the interpreter's own exit.
- At ``G``: if the process is still there (a worker or a model's synchronous
  code that does not stop), it exits at once with status 1, its workers with it.

A second signal does the cut at once and leaves the answers half a second to go
out before the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

from inferd.observability.logs import SERVER_EVENT
from inferd.runtimes.common import release_idle_step_threads
from inferd.serving.drain import Drain

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The end of the grace period kept for answering the requests the cut stops, for
# stopping the workers and for the exit (at most a third of it). Measured on a
# loaded 2-core machine: about 1 s from the cut to the exit with 2 workers.
CUT_RESERVE = 2.0
# In a protocol process: a SIGTERM this soon after the first is the same stop,
# delivered both by a service manager and by the supervisor that forwards it.
SAME_STOP_SECONDS = 1.0
# What the supervisor sends a protocol process for a second SIGTERM/SIGINT it got:
# the cut, however soon after the first (a repeated SIGTERM within SAME_STOP_SECONDS
# would be taken for the same stop). Logged as the SIGTERM it stands for.
CUT_SIGNAL = signal.SIGUSR2

# After a second signal: how long the answers of the cut get before the exit.
HURRY_SECONDS = 0.5
# The exit status when the deadline, not the orderly shutdown, ends the process.
FORCED_EXIT_STATUS = 1


def exit_stopped(status: int) -> NoReturn:
    """End a server process whose shutdown is over, without the interpreter's own
    finalization: tearing down the ~1,000 modules a server imports took 0.1-0.7 s on
    a loaded 2-core machine, after the server had stopped. With protocol processes
    the model host and then the supervisor paid it one after the other, past
    shutdown_grace_seconds. Nothing of the server needs it: the logs and the standard
    streams are flushed first. For the processes' entry points only (cli.py,
    supervisor/child.py), never for a server run inside another program."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def reserve(grace: float) -> float:
    return min(CUT_RESERVE, grace / 3)


def cut_after(grace: float) -> float:
    """Seconds from the signal to the cut."""
    return grace - reserve(grace)


def servers_stop_after(grace: float) -> float:
    """Seconds from the signal after which the servers stop waiting for connections."""
    return grace - reserve(grace) * 3 / 4


def close_ends_after(grace: float) -> float:
    """Seconds from the signal after which unloading and stopping the workers stop
    waiting: a worker still busy (its request was stopped, its model's code was not)
    is killed with the server when it exits."""
    return grace - reserve(grace) / 2


class Shutdown:
    """One server's drain: the signals in; readiness, the cut and the exit out.

    ``stop_serving`` is called (on the event loop) when the drain begins."""

    def __init__(
        self,
        drain: Drain,
        grace: float,
        stop_serving: Callable[[], None],
        same_stop_seconds: float = 0.0,
    ) -> None:
        """``same_stop_seconds``: a signal this soon after the first is the same stop
        sent twice (ignored), not the second signal that stops requests at once."""
        self._drain = drain
        self._same_stop_seconds = same_stop_seconds
        self._grace = grace
        self._stop_serving = stop_serving
        self._signals = 0
        self._begun: float | None = None  # time.monotonic() of the first signal
        self._first_signal_at: float | None = None
        self._cut_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous_handlers: dict[signal.Signals, Any] = {}
        self._exit = ExitDeadline(self._in_flight)

    def install_signal_handlers(self, signals: tuple[signal.Signals, ...] = SIGNALS) -> None:
        """Handle ``signals`` (SIGTERM and SIGINT; in a protocol process SIGTERM and
        :data:`CUT_SIGNAL`) from now on (call it on the event loop)."""
        self._loop = asyncio.get_running_loop()
        for sig in signals:
            self._previous_handlers[sig] = signal.signal(sig, self._on_signal)

    def restore_signal_handlers(self) -> None:
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)

    def begin(self, why: str, signalled_at: float | None = None) -> None:
        """Readiness false and new requests refused from now on, the cut planned;
        on the event loop. Once only: later calls do nothing."""
        if self._begun is not None:
            return
        self._begun = begun = time.monotonic() if signalled_at is None else signalled_at
        self._exit.arm(begun + self._grace)
        self._drain.close()
        logger.info(
            "%s: shutting down. Not ready, refusing new requests; %s may finish within "
            "%gs (shutdown_grace_seconds); a second signal stops them at once",
            why,
            self._in_flight(),
            self._grace,
            extra=SERVER_EVENT,
        )
        delay = max(0.0, begun + cut_after(self._grace) - time.monotonic())
        loop = asyncio.get_running_loop()
        self._cut_timer = loop.call_later(delay, self._cut, "The grace period is almost over")
        self._stop_serving()

    def hurry(self, why: str, signalled_at: float | None = None) -> None:
        """Stop what runs now (on the event loop); the exit follows its answers."""
        self.begin(why, signalled_at)
        self._cut(why)

    def seconds_until_servers_stop(self) -> float:
        """How long the servers may still wait for their connections to finish."""
        return self._seconds_until(servers_stop_after(self._grace))

    def seconds_until_close_ends(self) -> float:
        """How long unloading the models and stopping the workers may still take."""
        return self._seconds_until(close_ends_after(self._grace))

    def _seconds_until(self, after: float) -> float:
        assert self._begun is not None, "the drain has not begun"
        return max(0.0, self._begun + after - time.monotonic())

    def finished(self) -> None:
        """The orderly shutdown is done: nothing is left to force, unless model code
        still runs in a thread of its model (a plain predict or generator run off the
        event loop, its client answered at the cut): the interpreter would wait for it
        at exit, past the deadline, so the process exits now, status 1 (not drained)."""
        release_idle_step_threads()  # idle, they would read as model code still running
        running = model_threads_running()
        if running:
            logger.error(
                "Model code is still running (%s) after the shutdown: exiting now",
                ", ".join(running),
            )
            logging.shutdown()
            os._exit(FORCED_EXIT_STATUS)
        self._exit.cancel()
        if self._cut_timer is not None:
            self._cut_timer.cancel()
        if self._begun is not None:
            took = time.monotonic() - self._begun
            logger.info("inferd stopped %.2fs after shutting down began", took, extra=SERVER_EVENT)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Runs in the main thread between two bytecodes, wherever the event loop was
        (even inside a model's code that blocks it): it only arms the exit deadline,
        so that it holds whatever the loop does, and hands the rest to the loop."""
        assert self._loop is not None
        now = time.monotonic()
        if (
            signum != CUT_SIGNAL
            and self._first_signal_at is not None
            and now - self._first_signal_at < self._same_stop_seconds
        ):
            return
        self._first_signal_at = self._first_signal_at or now
        self._signals += 1
        first = self._signals == 1
        self._exit.arm(now + (self._grace if first else HURRY_SECONDS))
        name = "SIGTERM" if signum == CUT_SIGNAL else signal.Signals(signum).name
        if first:
            self._loop.call_soon_threadsafe(self.begin, f"Received {name}", now)
        else:
            self._loop.call_soon_threadsafe(self.hurry, f"Received {name} again", now)

    def _cut(self, why: str) -> None:
        if self._cut_timer is not None:
            self._cut_timer.cancel()
        calls, streams = self._drain.cut()
        if calls or streams:
            logger.warning(
                "%s: stopped %d request(s) and %d stream(s) still running; "
                "their clients were told the server is shutting down",
                why,
                calls,
                streams,
            )

    def _in_flight(self) -> str:
        return f"{self._drain.calls} request(s) and {self._drain.streams} stream(s) in flight"


# A model's threads (workers/loaded_model.py) are named after it with this prefix.
MODEL_THREAD_PREFIX = "inferd-"
# How long idle model threads get to end once their pools were shut.
THREADS_ENDING_SECONDS = 0.2


def model_threads_running() -> list[str]:
    """The names of a model's threads still alive after a short wait: non-daemon, so
    the interpreter would wait for them at its exit."""
    until = time.monotonic() + THREADS_ENDING_SECONDS
    running = []
    for thread in threading.enumerate():
        if thread.daemon or not thread.name.startswith(MODEL_THREAD_PREFIX):
            continue
        thread.join(max(0.0, until - time.monotonic()))
        if thread.is_alive():
            running.append(thread.name)
    return running


class ExitDeadline:
    """A thread that exits the process at a deadline, once armed, unless cancelled.

    A thread, not a timer on the event loop: a model's synchronous code running on
    the loop (``parallel_workers: 0``) must not keep the process past its deadline.
    Worker processes die with it (they asked the kernel to kill them with it).
    Arming only stores a float and sets an event: safe from a signal handler."""

    def __init__(self, describe: Callable[[], str]) -> None:
        self._describe = describe
        self._at = math.inf
        self._cancelled = False
        self._wake = threading.Event()
        thread = threading.Thread(target=self._watch, name="inferd-exit-deadline", daemon=True)
        thread.start()

    def arm(self, at: float) -> None:
        """Exit at ``at`` (time.monotonic()), or earlier if armed so before."""
        self._at = min(self._at, at)
        self._wake.set()

    def cancel(self) -> None:
        self._cancelled = True
        self._wake.set()

    def _watch(self) -> None:
        while not self._cancelled:
            left = self._at - time.monotonic()
            if left <= 0:
                logger.error(
                    "inferd did not stop by its shutdown deadline (%s); exiting now, "
                    "worker processes with it",
                    self._describe(),
                )
                os._exit(FORCED_EXIT_STATUS)
            self._wake.wait(None if math.isinf(left) else left)
            self._wake.clear()
