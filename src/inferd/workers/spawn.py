"""Starting a worker process and seeing it end: the only code that spawns one.

:func:`spawn` starts ``python -m inferd.workers.worker`` (the server's
interpreter, or a model environment's) with one end of a socket pair (the fork
parent is started the same way, :func:`spawn_module`), and
:func:`reap` waits for it to exit. Another way of starting workers (forking a
warmed-up parent, starting them in parallel) replaces these two functions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from inferd.workers.environments import WorkerEnvironment
from inferd.workers.process_handle import ProcessHandle

logger = logging.getLogger(__name__)

EXIT_POLL_INTERVAL = 0.005


def spawn(environment: WorkerEnvironment | None) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """A new worker process and the main process's end of its socket."""
    return spawn_module("inferd.workers.worker", environment)


def spawn_module(
    module: str, environment: WorkerEnvironment | None, kind: int = socket.SOCK_STREAM
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """``python -m module FD PID`` (the server's interpreter, or the environment's) with
    one end of a UNIX socket pair of ``kind`` as FD, and the main process's end."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, kind)
    python = sys.executable if environment is None else environment.python
    command = [python, "-m", module, str(theirs.fileno()), str(os.getpid())]
    variables = None if environment is None else environment.process_environment()
    try:
        process = subprocess.Popen(
            command, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=variables
        )
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    return process, ours


async def reap(process: ProcessHandle, grace: float, label: str) -> str:
    """How the process ended, once it has; killed if still running after ``grace``."""
    deadline = time.monotonic() + grace
    while process.poll() is None:
        if time.monotonic() > deadline:
            logger.warning(
                "%s did not exit %.0fs after its socket closed; killing it", label, grace
            )
            process.kill()
            deadline = float("inf")
        await asyncio.sleep(EXIT_POLL_INTERVAL)
    return describe_exit(process.returncode)


def describe_exit(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    if name == "SIGKILL":
        return "was killed by SIGKILL (by someone, or by the out-of-memory killer)"
    return f"was killed by {name}"
