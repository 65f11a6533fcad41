"""A model's fork parent (``fork_workers``): load the model once, fork its workers.

Started by the main process as ``python -m inferd.workers.forkserver FD PARENT_PID``
(the model environment's interpreter for a model with its own environment), with
one end of a UNIX ``SOCK_SEQPACKET`` pair as file descriptor FD: one message of
:mod:`inferd.workers.packets` per packet, and a worker's socket travels as
``SCM_RIGHTS`` beside the command that forks it.

The process stays clean so that forking it is safe (:mod:`.fork_safety`): one
Python thread, no event loop running, no CUDA, no grpc core running. It blocks on
its socket and does two things:

- ``LoadModel``: import and load the model (its ``load()`` runs to the end on an
  event loop that is closed afterwards), then ``gc.freeze()``, so the collector
  never writes to the model's objects and their pages stay shared with the workers.
  Answered ``Loaded``, ``LoadFailed`` (the load's error) or ``Unforkable`` (why the
  model must be loaded in each worker instead).
- ``ForkWorker``: check again that forking is safe, fork; the child becomes a worker
  (:class:`PreloadedWorker`) on the socket that came with the command. Answered
  ``Forked`` with the child's pid (or ``ForkFailed``).

A worker is not this process's child: it is forked through a middle process that
exits at once (:func:`inferd.workers.adoption.fork_adopted`), so the main process,
a subreaper, adopts it, reaps it, and keeps it when this process dies: a fork
parent's death costs the next forks only, never the workers serving (the main
process starts a new parent meanwhile). This process exits when its socket reaches
end-of-file, and is killed by the kernel when the main process dies
(``PR_SET_PDEATHSIG``), as each worker is, so nothing outlives the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys

from inferd import custom_metrics
from inferd.model import Model, WorkerContext
from inferd.observability.logs import configure_logging
from inferd.settings import ModelSettings, ServerSettings
from inferd.workers import ipc, oom_score, packets
from inferd.workers.adoption import fork_adopted, name_process
from inferd.workers.base import LoadedInstance
from inferd.workers.fork_safety import (
    fork_hazards,
    hold_openmp,
    open_sockets,
    openmp_hazard,
    release_openmp,
    sockets_left_open,
)
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.runtime_loader import load_runtime
from inferd.workers.worker import Worker, die_with_parent

logger = logging.getLogger(__name__)

# A forked worker's name (ps, /proc/PID/comm): its command line is its fork parent's.
WORKER_NAME = "inferd-worker"


class ForkServer:
    """Serves the main process's commands until its socket closes."""

    def __init__(self, control: socket.socket, adopter: int) -> None:
        """``adopter``: the main process, which adopts the forked children."""
        self._control = control
        self._adopter = adopter
        self._model: Model | None = None
        self._openmp: str | None = None  # the OMP_NUM_THREADS the workers get back

    def serve(self) -> None:
        while True:
            try:
                received = packets.receive(self._control)
            except ConnectionResetError:  # the main process died with data unread
                return
            except ipc.ProtocolError:
                logger.exception("A fork parent's command is unreadable; reading on")
                continue
            if received is None:
                return  # the main process closed its end (or died)
            message, fds = received
            self._handle(message, fds)
            packets.close_all(fds)  # a fork closed its own; anything else is not ours to keep

    def _handle(self, message: packets.Message, fds: list[int]) -> None:
        match message:
            case packets.LoadModel(sys_path, server, settings):
                self._load(sys_path, server, settings)
            case packets.ForkWorker(token):
                self._fork(token, fds)
            case _:
                logger.error("A model's fork parent was sent a %s", type(message).__name__)

    def _load(self, sys_path: list[str], server: ServerSettings, settings: ModelSettings) -> None:
        if sys_path:  # the main process's, as a worker's Init gives it
            sys.path[:] = sys_path
        configure_logging(server)
        if server.metrics_enabled:
            # Metrics defined in load() go out with each worker's first reply.
            custom_metrics.start_buffering()
        sockets_before = open_sockets()  # this process's own: its control socket
        # A team of one starts no OpenMP pool: XGBoost's and LightGBM's loads stay
        # forkable; each worker gets its threads back (release_openmp).
        self._openmp = hold_openmp()
        try:
            self._model = asyncio.run(load_model(settings))
        except Exception as error:
            self._send(packets.LoadFailed(ipc.error_to_wire(error)))
            return
        gc.collect()
        gc.freeze()  # the collector never touches these objects: their pages stay shared
        hazards = fork_hazards()
        if sockets := sockets_left_open(sockets_before):
            hazards.append(sockets)
        if not hazards and (openmp := openmp_hazard()):
            hazards.append(openmp)
        if hazards:
            self._send(packets.Unforkable("; ".join(hazards)))
        else:
            self._send(packets.Loaded(os.getpid()))

    def _fork(self, token: int, fds: list[int]) -> None:
        hazards = fork_hazards()
        if self._model is None or len(fds) != 1 or hazards:
            why = "; ".join(hazards) or "no model loaded, or no socket came with the command"
            self._send(packets.ForkFailed(token, why))
            return
        try:
            pid = fork_adopted(self._adopter)
        except OSError as error:  # out of processes or memory: the pool backs off
            self._send(packets.ForkFailed(token, f"fork failed: {error}"))
            return
        if pid == 0:
            self._become_worker(fds.pop())
        self._send(packets.Forked(token, pid))

    def _become_worker(self, fd: int) -> None:
        """In the child: drop what is the fork parent's, serve the worker's socket, exit."""
        code = 0
        try:
            self._control.close()  # the main process must see EOF when the parent dies
            name_process(WORKER_NAME)  # its command line is the parent's
            oom_score.take_role(oom_score.FORKED)
            reseed_numpy()
            release_openmp(self._openmp)
            sock = socket.socket(fileno=fd)
            os.set_inheritable(fd, False)  # processes a runtime starts must not hold it open
            assert self._model is not None
            PreloadedWorker(sock, self._model).serve()
        except BaseException:
            logger.exception("A forked worker failed")
            code = 1
        finally:
            os._exit(code)  # never back into the fork parent's loop, nor its atexit

    def _send(self, message: packets.Message) -> None:
        with contextlib.suppress(OSError):  # the main process is gone: EOF ends the loop
            packets.send(self._control, message)


async def load_model(settings: ModelSettings) -> Model:
    """Load the runtime as a worker would (its metrics labelled with its model)."""
    token = custom_metrics.set_model(custom_metrics.model_labels(settings.name, settings.version))
    try:
        # No worker index yet: each worker's context is set when it adopts the model.
        return await load_runtime(settings, WorkerContext())
    finally:
        custom_metrics.reset_model(token)


class PreloadedWorker(Worker):
    """A worker forked from a fork parent: its first LoadInWorker adopts the model loaded there
    (no import, no load: only the warm-up runs here)."""

    def __init__(self, sock: socket.socket, model: Model) -> None:
        super().__init__(sock)
        self._preloaded: Model | None = model

    async def _load(
        self, instance_id: int, settings: ModelSettings, device: str | None
    ) -> LoadedInstance:
        model, self._preloaded = self._preloaded, None
        if model is None:  # not the model it was forked for: load it as any worker does
            return await super()._load(instance_id, settings, device)
        model.context = WorkerContext(self._index, device)
        loaded = await LoadedModel.adopt(model)
        self._models[instance_id] = loaded
        return loaded.instance()


def reseed_numpy() -> None:
    """Give each worker its own numpy global random state (a fork copies the parent's)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def main(argv: list[str] | None = None) -> None:
    fd, parent_pid = (int(arg) for arg in (argv or sys.argv[1:]))
    die_with_parent(parent_pid)
    oom_score.take_role(oom_score.PARENT)  # its spawner's score may be higher
    # The main process decides when the fork parent stops (by closing its socket).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    control = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    ForkServer(control, parent_pid).serve()
    # Its socket closed: exit now. The interpreter's finalization would free the
    # model's objects one by one (a second or more for a big model) while the server's
    # own exit waits for this process.
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
