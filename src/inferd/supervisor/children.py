"""The supervisor's protocol processes: each started, watched, restarted when it dies.

A protocol process that exits while the supervisor is not stopping is started
again with the same index (so the same private sockets), after a pause that
doubles from 0.5 s (0.1 s for a forked one: nothing to import or load) up to 10 s
while it keeps dying soon after its start, and is back to the first once a process
ran a minute: a process that fails at start (a port
taken, a broken repository) does not spin the CPU, and one that dies once in a
while comes back at once.

A process that exits with :data:`CONFIGURATION_EXIT_STATUS` before it ever
answered ready could not start with the server's settings (a restriction's keys
that cannot be read, unusable TLS files, ...): starting it again would fail the
same way for good, so it is not restarted and the supervisor stops, as a lone
server stops on the same settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from inferd.errors import ConfigurationError
from inferd.supervisor import fanout
from inferd.supervisor.paths import (
    PRIVATE_DIR_ENV,
    PROTOCOL_INDEX_ENV,
    RESTARTED_ENV,
    PrivatePaths,
)

logger = logging.getLogger(__name__)

FIRST_PAUSE_SECONDS = 0.5
FORKED_FIRST_PAUSE_SECONDS = 0.1
LONGEST_PAUSE_SECONDS = 10.0
# Up this long, a process that dies is restarted after the first pause again.
STEADY_SECONDS = 60.0
READY_POLL_SECONDS = 0.05
SLOWEST_READY_POLL_SECONDS = 1.0
READY_REQUEST_TIMEOUT = 2.0
# How a protocol process says it cannot start with these settings (it printed why).
# Not 1: Python exits 1 on any uncaught exception, a crash worth a restart. sysexits' EX_CONFIG.
CONFIGURATION_EXIT_STATUS = 78


class ChildProcess(Protocol):
    """What is watched of a protocol process: a spawned one (asyncio's Process) or
    one forked by the protocol fork parent and adopted here (adoption.AdoptedChild)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, signum: int) -> None: ...


# Forks a protocol process with this environment; None when it cannot (then spawned).
Fork = Callable[[Mapping[str, str]], Awaitable[ChildProcess | None]]


@dataclass
class Backoff:
    """The pause before restarting a process that exited after ``uptime`` seconds."""

    first: float = FIRST_PAUSE_SECONDS
    longest: float = LONGEST_PAUSE_SECONDS
    steady_after: float = STEADY_SECONDS
    _next: float = 0.0

    def pause_after(self, uptime: float) -> float:
        if uptime >= self.steady_after or self._next == 0.0:
            self._next = self.first
        pause = self._next
        self._next = min(self._next * 2, self.longest)
        return pause


def describe_exit(returncode: int) -> str:
    """``exit code 3`` or ``signal SIGKILL`` (a negative return code)."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class Child:
    """Protocol process ``index``, kept running until :meth:`stop`."""

    def __init__(
        self,
        index: int,
        command: Sequence[str],
        environment: Mapping[str, str],
        paths: PrivatePaths,
        label: str = "",
        fork: Fork | None = None,
    ) -> None:
        """``fork``: how to fork it from the protocol fork parent, rather than start a
        fresh interpreter (``fork_protocol_processes``)."""
        self.index = index
        self._fork = fork
        self.label = label or f"Protocol process {index}"
        self._command = list(command)
        self._environment = {**environment, PROTOCOL_INDEX_ENV: str(index)}
        self._paths = paths
        # A fork is cheap (nothing to import or load): a forked process that died is back
        # sooner; the pause still doubles while it keeps dying.
        self._backoff = Backoff(first=FORKED_FIRST_PAUSE_SECONDS if fork else FIRST_PAUSE_SECONDS)
        self._stopping = asyncio.Event()
        self.process: ChildProcess | None = None
        self.ready = asyncio.Event()  # set each time a start answers ready
        self._has_served = False  # whether any start of it answered ready
        # How its last process ended once stopped (None: none was running).
        self.stopped_with: int | None = None

    async def keep_running(self) -> None:
        """Start the process, and again whenever it exits, until :meth:`stop`;
        ConfigurationError when it could not start with these settings."""
        restarted = False
        while not self._stopping.is_set():
            started = time.monotonic()
            process = self.process = await self._start(restarted)
            announced = asyncio.create_task(self._announce_ready(process, restarted))
            restarted = True
            if self._stopping.is_set():  # stopped while it was starting
                self.signal(signal.SIGTERM)
            returncode = await process.wait()
            announced.cancel()
            self.ready.clear()
            if self._stopping.is_set():
                self.stopped_with = returncode
                logger.info("%s stopped (%s)", self.label, describe_exit(returncode))
                return
            if returncode == CONFIGURATION_EXIT_STATUS and not self._has_served:
                raise ConfigurationError(
                    f"{self.label} could not start with these settings (its error is above)"
                )
            pause = self._backoff.pause_after(time.monotonic() - started)
            logger.error(
                "%s (pid %d) exited with %s; starting it again in %.1fs",
                self.label,
                process.pid,
                describe_exit(returncode),
                pause,
            )
            await self._pause(pause)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process, if it runs."""
        process = self.process
        if process is not None and process.returncode is None:
            # It may have exited already: keep_running sees it.
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """No more restarts; the process is asked to drain (SIGTERM)."""
        self._stopping.set()
        self.signal(signal.SIGTERM)

    async def _start(self, restarted: bool) -> ChildProcess:
        # In the supervisor's process group, so whoever stops or measures the group
        # (a Ctrl-C, a process manager, a benchmark) reaches it too; it ignores SIGINT
        # and drains on the SIGTERM the supervisor forwards (child.py). A forked one
        # is in it too: the fork parent is.
        environment = {**self._environment, RESTARTED_ENV: "1" if restarted else "0"}
        if self._fork is not None:
            forked = await self._fork(environment)
            if forked is not None:
                logger.debug("Forked %s (pid %d)", self.label.lower(), forked.pid)
                return forked
        process = await asyncio.create_subprocess_exec(
            *self._command, env=environment, stdin=asyncio.subprocess.DEVNULL
        )
        logger.debug("Started %s (pid %d)", self.label.lower(), process.pid)
        return process

    async def _announce_ready(self, process: ChildProcess, restarted: bool) -> None:
        """Poll the process's private socket until it answers ready; then say so (at
        the server's start the supervisor says it once for all: detail). The polls
        slow down to one a second: a model that failed to load keeps a process serving
        but not ready, maybe for good."""
        socket = self._paths.rest(self.index)
        pause = READY_POLL_SECONDS
        while True:
            answer = await fanout.send(
                socket, "GET", "/v2/health/ready", timeout_s=READY_REQUEST_TIMEOUT
            )
            if answer.ok:
                break
            await asyncio.sleep(pause)
            pause = min(pause * 2, SLOWEST_READY_POLL_SECONDS)
        self._has_served = True
        self.ready.set()
        level = logging.INFO if restarted else logging.DEBUG
        logger.log(level, "%s (pid %d) is serving", self.label, process.pid)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)


def environment_of_children(paths: PrivatePaths) -> dict[str, str]:
    """This process's environment plus where the private folder is."""
    return {**os.environ, PRIVATE_DIR_ENV: str(paths.folder)}
