"""The drain: what happens from the first SIGTERM (or SIGINT) to the exit.

With ``G`` = ``shutdown_grace_seconds``:

- At once (:class:`Shutdown` is made): readiness turns false (REST ``/v2/health/ready`` 503, gRPC
  ``ServerReady`` false, the health service NOT_SERVING), the listening sockets
  close and gRPC refuses new calls, and an inference request that still reaches
  the server gets 503 / UNAVAILABLE (:mod:`inferd.drain`). Every request already
  admitted (queued, running, streaming) goes on and is answered.
- At ``G`` minus a reserve (:func:`cut_after`): the requests still running are
  stopped (the cut): each fails with ShuttingDown, so a REST request gets a 503,
  an SSE stream a last ``event: error``, a gRPC request UNAVAILABLE, a gRPC stream
  an ``error_message`` per open request and then UNAVAILABLE. The log says how
  many were stopped.
- Halfway through the reserve the servers stop waiting for their connections;
  models are unloaded and the workers stopped.
- At ``G``: if the process has not exited yet (a worker or a model's synchronous
  code that does not stop), it exits at once with status 1, its workers with it.

A second signal does the cut at once and leaves the answers half a second to go
out before the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

from ..drain import Drain

logger = logging.getLogger(__name__)

# The end of the grace period kept for answering the requests the cut stops and
# for stopping the workers (at most a quarter of it).
CUT_RESERVE = 1.0
# After a second signal: how long the answers of the cut get before the exit.
HURRY_SECONDS = 0.5
# The exit status when the deadline, not the orderly shutdown, ends the process.
FORCED_EXIT_STATUS = 1


def reserve(grace: float) -> float:
    return min(CUT_RESERVE, grace / 4)


def cut_after(grace: float) -> float:
    """Seconds from the signal to the cut."""
    return grace - reserve(grace)


def servers_stop_after(grace: float) -> float:
    """Seconds from the signal after which the servers stop waiting for connections."""
    return grace - reserve(grace) / 2


class Shutdown:
    """One server's drain, from the moment it is made: readiness is false from then."""

    def __init__(self, drain: Drain, grace: float, why: str) -> None:
        self._drain = drain
        self._grace = grace
        self._begun = time.monotonic()
        drain.close()
        logger.info(
            "%s: shutting down. Not ready and refusing new requests; %d request(s) and "
            "%d stream(s) in flight may finish within %gs (shutdown_grace_seconds), "
            "a second signal stops them at once",
            why,
            drain.calls,
            drain.streams,
            grace,
        )
        self._cut_timer = asyncio.get_running_loop().call_later(
            cut_after(grace), self._cut, "The shutdown grace period is almost over"
        )
        self._exit = _ExitDeadline(self._begun + grace)

    def seconds_until_servers_stop(self) -> float:
        """How long the servers may still wait for their connections to finish."""
        return max(0.0, self._begun + servers_stop_after(self._grace) - time.monotonic())

    def hurry(self, why: str) -> None:
        """Stop what runs now; exit as soon as its answers are out."""
        self._cut(why)
        self._exit.move(time.monotonic() + HURRY_SECONDS)

    def finished(self) -> None:
        """The orderly shutdown is done: nothing is left to force."""
        self._cut_timer.cancel()
        self._exit.cancel()
        logger.info("inferd stopped %.2fs after the signal", time.monotonic() - self._begun)

    def _cut(self, why: str) -> None:
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
        else:
            logger.info("%s: nothing was still running", why)


class _ExitDeadline:
    """Exits the process at the deadline unless cancelled first.

    A thread, not a timer on the event loop: a model's synchronous code running on
    the loop (``parallel_workers: 0``) must not keep the process past its deadline.
    Worker processes die with it (they ask the kernel to kill them with it)."""

    def __init__(self, at: float) -> None:
        self._at = at
        self._cancelled = False
        self._wake = threading.Event()
        thread = threading.Thread(target=self._watch, name="inferd-exit-deadline", daemon=True)
        thread.start()

    def move(self, at: float) -> None:
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
                    "inferd did not stop by its shutdown deadline; exiting now "
                    "(worker processes still running are killed with it)"
                )
                os._exit(FORCED_EXIT_STATUS)
            self._wake.wait(left)
            self._wake.clear()
