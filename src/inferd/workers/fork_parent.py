"""The main process's side of a model's fork parent (``fork_workers``).

:class:`ForkParent` spawns the fork parent (:mod:`inferd.workers.forkserver`),
has it load the model, and asks it for workers; :class:`ForkedWorkerProcess` is a
:class:`~inferd.workers.process.WorkerProcess` whose process is forked there
instead of spawned, so everything else about a worker (its channel, its books,
its restarts by the pool) is as for any worker.

A worker's socket pair is made here, as for a spawned worker; its other end
travels to the fork parent beside the ``ForkWorker`` command and is closed here at once,
so the worker's socket reaches end-of-file when the main process closes its end
(or dies). The worker is not the fork parent's child but this process's: forked
through a middle process that exits at once, it is adopted here (this process is a
subreaper, workers/adoption.py) and reaped here (:class:`AdoptedChild`). So when the
fork parent dies its workers keep serving, and a new fork parent is started at once
in the background (it loads the model again), for the next worker that must be
forked.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from inferd.errors import WorkerLost
from inferd.settings import ModelSettings, ServerSettings
from inferd.workers import ipc, packets
from inferd.workers.adoption import AdoptedChild, become_subreaper
from inferd.workers.channel import Channel
from inferd.workers.environments import WorkerEnvironment
from inferd.workers.process import WorkerProcess
from inferd.workers.spawn import describe_exit, spawn_module

logger = logging.getLogger(__name__)

# How long a fork parent whose socket closed may take to exit before it is killed.
EXIT_GRACE = 2.0
EXIT_POLL_INTERVAL = 0.005


class ForkParent:
    """One model's fork parent, as the main process drives it."""

    def __init__(
        self, server: ServerSettings, settings: ModelSettings, environment: WorkerEnvironment | None
    ) -> None:
        self.settings = settings
        self.environment = environment
        self._server = server
        self._process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._loaded: asyncio.Future[packets.Message] | None = None
        self._forks: dict[int, asyncio.Future[AdoptedChild]] = {}
        self._tokens = itertools.count()
        self._restart_lock = asyncio.Lock()
        self._closing = False  # stopping, or stopped: its death is not news
        self._released = False  # closed for good: no fork starts a new parent
        self._loaded_once = False  # this parent loaded the model: its death is replaced
        # Reaping a parent that died unasked, and starting the next (held: the loop
        # keeps only weak references).
        self._reaping: asyncio.Future[None] | None = None
        self._replacing: asyncio.Future[None] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._sock is not None

    async def start(self) -> str:
        """Start the fork parent and load the model there: "" when workers can be forked
        from it, else why not (it is closed then). Raises the load's error (ModelError,
        ConfigurationError) after closing it."""
        begun = time.monotonic()
        self._closing = False  # a parent that failed to start before is started afresh
        if not become_subreaper():  # its workers must be ours, to outlive it
            raise WorkerLost("Workers cannot be adopted here (Linux's PR_SET_CHILD_SUBREAPER)")
        self._spawn()
        loop = asyncio.get_running_loop()
        self._loaded = loaded = loop.create_future()
        import_path = list(sys.path) if self.environment is None else []
        try:
            self._send(packets.LoadModel(import_path, self._server, self.settings))
            answer = await loaded
        except WorkerLost:
            await self._stop()
            raise WorkerLost(
                f"Loading model {self.settings.name!r} failed: its fork parent (pid "
                f"{self.pid}) {self._exit_status()} while loading it"
            ) from None
        except BaseException:
            await self._stop()
            raise
        if isinstance(answer, packets.LoadFailed):
            await self._stop()
            raise ipc.error_from_wire(answer.error)
        if isinstance(answer, packets.Unforkable):
            await self._stop()
            return answer.why
        self._loaded_once = True
        logger.info("Loaded model %r in its fork parent (pid %s) in %.2fs",
                    self.settings.name, self.pid, time.monotonic() - begun)  # fmt: skip
        return ""

    def _exit_status(self) -> str:
        """How the fork parent ended, once reaped ("exited with code 3")."""
        process = self._process
        if process is None or process.returncode is None:
            return "stopped"
        return describe_exit(process.returncode)

    def _spawn(self) -> None:
        # Datagram-like messages: a FORK command travels with the worker's socket.
        self._process, ours = spawn_module(
            "inferd.workers.forkserver", self.environment, socket.SOCK_SEQPACKET
        )
        ours.setblocking(False)
        self._sock = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable)

    async def fork(self, worker_socket: socket.socket) -> AdoptedChild:
        """A new worker serving ``worker_socket``'s other end, the model adopted on its
        first LoadInWorker; WorkerLost if no fork parent can give one."""
        await self._ensure_running()
        token = next(self._tokens)
        future: asyncio.Future[AdoptedChild] = asyncio.get_running_loop().create_future()
        self._forks[token] = future
        try:
            self._send(packets.ForkWorker(token), worker_socket.fileno())
            return await future
        finally:
            self._forks.pop(token, None)

    async def _ensure_running(self) -> None:
        """Start a new fork parent (loading the model again) if the last one died."""
        async with self._restart_lock:
            if self.running or self._released:
                return
            logger.error("The fork parent of model %r died; starting a new one (its "
                         "workers serve on)", self.settings.name)  # fmt: skip
            try:
                why = await self.start()
            except WorkerLost:
                raise
            except Exception as error:  # its load failed: the pool's next restart tries again
                raise WorkerLost(
                    f"The fork parent of model {self.settings.name!r} did not load it "
                    f"again: {error}"
                ) from None
            if why:  # what its load does, not a passing failure: no new parent again
                self._released = True
                raise WorkerLost(f"Model {self.settings.name!r} cannot be forked any more: {why}")

    def _send(self, message: packets.Message, fd: int | None = None) -> None:
        sock = self._sock
        if sock is None:
            raise WorkerLost(f"The fork parent of model {self.settings.name!r} has stopped")
        try:
            packets.send(sock, message, fd)
        except OSError as error:  # a full buffer too: it has stopped reading
            self._lost()
            raise WorkerLost(
                f"Cannot reach the fork parent of model {self.settings.name!r}: {error}"
            ) from None

    def _readable(self) -> None:
        sock = self._sock
        if sock is not None and not packets.receive_waiting(sock, self._received):
            self._lost()

    def _received(self, message: packets.Message) -> None:
        match message:
            case packets.Loaded() | packets.LoadFailed() | packets.Unforkable():
                _settle(self._loaded, lambda future: future.set_result(message))
            case packets.Forked(token, pid):
                child = AdoptedChild(pid)
                _settle(self._forks.get(token), lambda future: future.set_result(child))
            case packets.ForkFailed(token, why):
                error = WorkerLost(f"Cannot fork a worker of model {self.settings.name!r}: {why}")
                _settle(self._forks.get(token), lambda future: future.set_exception(error))
            case _:
                logger.error("A model's fork parent sent a %s", type(message).__name__)

    def _lost(self) -> None:
        """The fork parent's socket closed: it exited (or died); its workers serve on.
        One that died unasked is replaced at once, in the background."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        asyncio.get_running_loop().remove_reader(sock.fileno())
        sock.close()
        error = WorkerLost(f"The fork parent of model {self.settings.name!r} stopped")
        for future in [self._loaded, *self._forks.values()]:
            _settle(future, lambda waiting: waiting.set_exception(error))
        if self._process is not None and not self._closing:
            self._reaping = asyncio.ensure_future(_reap(self._process, EXIT_GRACE))
            if self._loaded_once:  # not one that died loading: start() says why
                self._replacing = asyncio.ensure_future(self._replace())
        self._loaded_once = False

    async def _replace(self) -> None:
        """Start the next fork parent now, so that a worker that dies later is forked
        again without waiting for a load; a failure is the next fork's to retry."""
        await asyncio.sleep(0)  # after _lost's caller: its socket is dropped
        try:
            await self._ensure_running()
        except WorkerLost as error:
            logger.error("%s; the next worker restart tries again", error)

    async def close(self) -> None:
        """Stop the fork parent for good (its workers should have stopped first)."""
        self._released = True
        await self._stop()

    async def _stop(self) -> None:
        """Stop this parent process; a later fork may start a new one unless released."""
        self._closing = True
        self._lost()
        await _reap(self._process, EXIT_GRACE)


async def _reap(process: subprocess.Popen[bytes] | None, grace: float) -> None:
    """Wait for a fork parent to exit; killed after ``grace``."""
    if process is not None:
        deadline = time.monotonic() + grace
        while process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                deadline = float("inf")
            await asyncio.sleep(EXIT_POLL_INTERVAL)


def _settle(
    future: asyncio.Future[Any] | None, settle: Callable[[asyncio.Future[Any]], None]
) -> None:
    if future is not None and not future.done():
        settle(future)


class ForkedWorkerProcess(WorkerProcess):
    """A worker of one model, forked from that model's fork parent."""

    def __init__(
        self,
        index: int,
        settings: ServerSettings,
        on_death: Callable[[WorkerProcess], None],
        parent: ForkParent,
    ) -> None:
        super().__init__(index, settings, on_death, parent.environment)
        self._parent = parent

    async def _spawn(self) -> Channel:
        ours, theirs = socket.socketpair()
        try:
            self._process = await self._parent.fork(theirs)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return await Channel.open(
            ours,
            self._describe_loss,
            self._channel_closed,
            self._describe_stream_loss,
            reads_acknowledged=True,
        )
