"""The supervisor's side of the protocol fork parent (``fork_protocol_processes``).

:class:`ProtocolForks` starts the parent (supervisor/protocol_parent.py), waits
until it has loaded the copied models, and asks it for protocol processes;
:class:`~inferd.workers.adoption.AdoptedChild` is a forked one's handle, which
children.py's ``Child`` watches as it watches a spawned process: a forked process is
the supervisor's child (adopted: the supervisor is a subreaper), not the parent's,
so the parent's death takes none of them. A parent that died is replaced at once,
in the background (a fresh interpreter that loads the models again), while its
processes serve on. When the parent cannot start or cannot fork, :meth:`fork`
returns None and the process is spawned as a fresh interpreter instead: a start
never fails for want of the parent.

The first parent is forked from the supervisor itself, before its event loop starts
(:func:`fork_parent_early`): no second interpreter starts and imports the stack (the
start of N processes is one interpreter's), the imported modules' pages are shared
by the supervisor, the parent and every protocol process, and the parent loads the
models while the supervisor opens its services. When that fork is not safe (a
thread runs) or fails, and for every later parent, it is started afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping

from inferd.supervisor import protocol_parent
from inferd.workers import packets
from inferd.workers.adoption import AdoptedChild, become_subreaper, name_process
from inferd.workers.fork_safety import fork_hazards

logger = logging.getLogger(__name__)

# How long the parent may take to exit once its socket closed.
EXIT_GRACE = 5.0


class EarlyParent:
    """The parent forked from the supervisor before its event loop: its pid, and how it
    is waited for (a child of ours no event loop knows: reaped here)."""

    POLL_SECONDS = 0.02

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock
        self.returncode: int | None = None

    async def wait(self) -> int:
        while not self._exited():
            await asyncio.sleep(self.POLL_SECONDS)  # only once its socket closed
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def _exited(self) -> bool:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: gone anyway
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode is not None


def fork_early(
    serve: Callable[[socket.socket], None],
    log: logging.Logger,
    failed: str,
    kind: socket.SocketKind = socket.SOCK_STREAM,
) -> EarlyParent:
    """Fork a process from this one (the supervisor, before any event loop or thread:
    check :func:`fork_hazards` first) that runs ``serve`` on its end of a new socket
    pair of ``kind`` and exits, never returning into the supervisor's code (``failed``:
    what ``log`` says if ``serve`` raises); the handle on it, holding our end. OSError
    if the fork failed (the sockets closed)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, kind)
    try:
        pid = os.fork()
    except OSError:
        mine.close()
        theirs.close()
        raise
    if pid == 0:
        code = 1
        try:
            mine.close()
            serve(theirs)
            code = 0
        except BaseException:
            log.exception(failed)
        finally:
            logging.shutdown()
            os._exit(code)
    theirs.close()
    return EarlyParent(pid, mine)


def fork_parent_early(repository: str) -> EarlyParent | None:
    """Fork the protocol fork parent from this process (the supervisor, before any
    event loop or thread); None, logged, when forking is not safe or fails (the
    parent is then started afresh when the first protocol process is forked)."""
    hazards = fork_hazards()
    if hazards:
        logger.info("The protocol fork parent is started afresh: %s", "; ".join(hazards))
        return None
    supervisor = os.getpid()

    def serve(theirs: socket.socket) -> None:
        name_process(protocol_parent.PARENT_NAME)
        protocol_parent.serve_parent(supervisor, repository, theirs)

    gc.freeze()
    failed = "The protocol fork parent failed"
    try:
        return fork_early(serve, logger, failed, socket.SOCK_SEQPACKET)
    except OSError as error:
        logger.warning("Could not fork the protocol fork parent (%s): starting it afresh", error)
        return None


class ProtocolForks:
    """The protocol fork parent of a supervisor serving ``repository``."""

    def __init__(
        self, repository: str, environment: Mapping[str, str], early: EarlyParent | None = None
    ) -> None:
        """``early``: the first parent, forked already (:func:`fork_parent_early`)."""
        self._repository = repository
        self._environment = dict(environment)
        self._process: asyncio.subprocess.Process | EarlyParent | None = None
        self._early = early
        self._sock: socket.socket | None = None
        self._ready: asyncio.Future[list[str]] | None = None
        self._forks: dict[int, asyncio.Future[AdoptedChild | None]] = {}
        self._tokens = itertools.count()
        self._starting = asyncio.Lock()
        self._closed = False
        # It exited before it ever said Ready: every start would (the log says why).
        self._broken = False
        self._reaping: set[asyncio.Task[int]] = set()
        self._replacing: asyncio.Task[bool] | None = None
        self._old_pids: set[int] = set()  # parents that died, until reaped
        self._adopted: dict[int, AdoptedChild] = {}  # forked: ours to reap, not a stray
        # Its children must be ours, to outlive it: else each is spawned instead.
        self._adopting = become_subreaper()
        if not self._adopting:
            logger.warning("Protocol processes are spawned: they cannot be adopted here")

    @property
    def pid(self) -> int | None:
        """The parent's pid while it runs (forked early and not asked for a fork yet too)."""
        process = self._process or self._early
        return process.pid if process is not None else None

    def own_pids(self) -> set[int]:
        """The parents and forked processes not reaped yet (their handles reap them)."""
        self._adopted = {p: c for p, c in self._adopted.items() if c.returncode is None}
        return {*self._old_pids, *self._adopted, *([self.pid] if self.pid is not None else [])}

    async def fork(self, environment: Mapping[str, str]) -> AdoptedChild | None:
        """A protocol process forked with ``environment``; None when it cannot be
        (the caller spawns one instead: the reason is logged)."""
        if self._closed or not self._adopting or not await self._running():
            return None
        assert self._sock is not None
        token = next(self._tokens)
        self._forks[token] = forked = asyncio.get_running_loop().create_future()
        self._send(packets.ForkProtocol(token, dict(environment)))
        return await forked

    async def close(self) -> None:
        """No more forks; the parent exits (call once its children have exited)."""
        self._closed = True
        if self._replacing is not None:
            self._replacing.cancel()
        self._drop_socket()
        early, self._early = self._early, None
        if early is not None:  # never asked for a fork: it sees EOF and exits
            early.sock.close()
        process = self._process or early
        if process is not None:
            try:
                await asyncio.wait_for(process.wait(), EXIT_GRACE)
            except TimeoutError:
                process.kill()
                await process.wait()

    async def _running(self) -> bool:
        """Start the parent unless it runs; whether it runs and has loaded."""
        async with self._starting:
            if self._sock is None and not self._broken and not self._closed:
                await self._start()
            if self._ready is None:
                return False
            try:
                await self._ready
            except ConnectionError:
                return False
            return self._sock is not None

    async def _start(self) -> None:
        early, self._early = self._early, None
        if early is not None:  # forked before the loop: it is loading already
            self._process = early
            self._listen(early.sock)
            return
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            try:
                self._process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "inferd.supervisor.protocol_parent",
                    str(os.getpid()),
                    self._repository,
                    str(theirs.fileno()),
                    pass_fds=(theirs.fileno(),),
                    env=self._environment,
                    stdin=asyncio.subprocess.DEVNULL,
                )
            except OSError as error:
                logger.error("Could not start the protocol fork parent: %s", error)
                mine.close()
                self._ready = None
                return
        self._listen(mine)

    def _listen(self, mine: socket.socket) -> None:
        mine.setblocking(False)
        self._sock = mine
        self._ready = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().add_reader(mine.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is not None and not packets.receive_waiting(sock, self._handle):
            self._on_parent_gone()

    def _handle(self, message: packets.Message) -> None:
        match message:
            case packets.Ready(pid, labels) if self._ready and not self._ready.done():
                logger.info(
                    "Protocol fork parent (pid %d) loaded %s: protocol processes share them",
                    pid,
                    ", ".join(labels) or "no model",
                )
                self._ready.set_result(labels)
            case packets.Forked(token, pid):
                self._adopted[pid] = child = AdoptedChild(pid)
                self._resolve(token, child)
            case packets.ForkFailed(token, why):
                logger.warning("Could not fork a protocol process (%s): starting one afresh", why)
                self._resolve(token, None)

    def _resolve(self, token: int, child: AdoptedChild | None) -> None:
        forked = self._forks.pop(token, None)
        if forked is not None and not forked.done():
            forked.set_result(child)

    def _on_parent_gone(self) -> None:
        """The parent exited: its children serve on (they are ours); a new parent is
        started at once, in the background, for the next fork."""
        if not self._closed:
            logger.error(
                "The protocol fork parent exited; its protocol processes serve on, and a "
                "new parent loads the models for the next one that must be forked"
            )
        self._drop_socket()
        if self._ready is not None and not self._ready.done():
            self._broken = True
            logger.error("Protocol processes are started afresh instead (each loads its models)")
            self._ready.set_exception(ConnectionError("the protocol fork parent exited"))
            self._ready.exception()  # retrieved: no "never retrieved" warning
        self._ready = None
        for token in list(self._forks):
            self._resolve(token, None)
        if not self._closed:
            process, self._process = self._process, None
            if process is not None:  # reaped
                reaping = asyncio.get_running_loop().create_task(process.wait())
                self._reaping.add(reaping)
                reaping.add_done_callback(self._reaping.discard)
                self._old_pids.add(process.pid)
                reaping.add_done_callback(lambda _: self._old_pids.discard(process.pid))
            if not self._broken:
                self._replacing = asyncio.get_running_loop().create_task(self._running())

    def _send(self, message: packets.Message) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):  # gone: its EOF tells us
                packets.send(self._sock, message)

    def _drop_socket(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
