"""The protocol fork parent: load the copied models once, fork the protocol processes.

Started by the supervisor (supervisor/protocol_forks.py) as ``python -m
inferd.supervisor.protocol_parent SUPERVISOR_PID REPOSITORY FD`` when
``fork_protocol_processes`` is on (the default) and several protocol processes
serve. FD is its end of a ``SOCK_SEQPACKET`` pair, one message of
:mod:`inferd.workers.packets` a packet.

What runs here before the first fork, and nothing else (docs/design.md "Protocol
processes forked from loaded models"): the imports of a protocol process's stack;
each model that every protocol process copies (host/placement.py) and that
loads at start, its ``load()`` run to its end on an event loop closed afterwards;
``gc.collect()`` and ``gc.freeze()``. GNU OpenMP is held to one thread while the
models load (fork_safety.hold_openmp: no pool starts) and given its threads back in
each child. No thread, no event loop, no grpc channel or
server, no CUDA, no request, no warm-up. After each model's load it checks what
workers/fork_safety.py checks for ``fork_workers``; a model whose load broke a rule
is logged (its name and what it costs) and the parent starts over without it
(``exec`` of itself, the model left out): that model then loads in each protocol
process. A model whose load failed is left out too: each process loads it and
reports the failure as without this parent.

Then it says ``Ready`` and serves ``ForkProtocol`` (the child's whole environment:
its index, restart flag, the supervisor's private folder), each child becoming a
protocol process that adopts the preloaded models (workers/preloaded.py), or the
model host (its role in that environment), which adopts none: it loads its own, and
shares the imported modules' pages as the protocol processes do. A child is forked
through a middle process that exits at once (workers/adoption.py): the supervisor, a
subreaper, adopts and reaps it, so this parent's death takes no protocol process (nor
the host) with it. It ignores SIGTERM and SIGINT (its children drain on the
supervisor's word) and exits when its socket closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from inferd.errors import ConfigurationError
from inferd.host.placement import Placement
from inferd.model import Model
from inferd.observability.logs import configure_logging, tag_process
from inferd.runtimes.common import no_progress_monitor
from inferd.server.roles import Role
from inferd.server.shutdown import exit_stopped
from inferd.serving.repository import ModelRepository
from inferd.settings import ModelSettings, ServerSettings
from inferd.settings.command_line import CommandLine
from inferd.settings.loader import load_server_settings
from inferd.supervisor import child
from inferd.supervisor.paths import PROTOCOL_INDEX_ENV, ROLE_ENV
from inferd.workers import oom_score, packets, preloaded
from inferd.workers.adoption import fork_adopted, name_process
from inferd.workers.fork_safety import (
    OMP_NUM_THREADS,
    fork_hazards,
    hold_openmp,
    open_sockets,
    openmp_hazard,
    release_openmp,
    sockets_left_open,
)
from inferd.workers.forkserver import ForkServer, load_model, reseed_numpy
from inferd.workers.worker import die_with_parent

logger = logging.getLogger(__name__)

# What a protocol process imports only once it serves (a lazy import of uvicorn's,
# httpx's, asyncio's): imported here, their pages are shared instead of each process's.
SERVING_MODULES = (
    "uvloop",
    "anyio",
    "anyio._backends._asyncio",
    "certifi",
    "h11",
    "httpcore",
    "concurrent.futures.thread",
    "uvicorn.lifespan.off",
    "uvicorn.protocols.websockets.auto",
)
# This parent's name (ps, /proc/PID/comm; 15 bytes at most) when it was forked from the
# supervisor: its command line is the supervisor's.
PARENT_NAME = "inferd-protopar"
# The model host's name when forked from this parent (a protocol process's: "inferd-proto-"
# and its index).
HOST_NAME = "inferd-host"
# The models a start of this parent left out (their load was not fork-safe): JSON list
# of labels, set by the parent itself before it starts over.
LEFT_OUT_ENV = "INFERD_FORK_LEFT_OUT"


class ProtocolForkServer(ForkServer):
    """Forks protocol processes that adopt ``models``."""

    def __init__(
        self, control: socket.socket, supervisor: int, repository: Path, models: list[Model]
    ) -> None:
        super().__init__(control, supervisor)
        self._repository = repository
        self._preloaded = models

    def announce_ready(self) -> None:
        """Tell the supervisor that protocol processes can be forked now."""
        self._send(packets.Ready(os.getpid(), [model.settings.label for model in self._preloaded]))

    def _handle(self, message: packets.Message, fds: list[int]) -> None:
        match message:
            case packets.ForkProtocol(token, environment):
                self._fork_protocol(token, environment)
            case _:
                logger.error("The protocol fork parent was sent a %s", type(message).__name__)

    def _fork_protocol(self, token: int, environment: dict[str, str]) -> None:
        hazards = fork_hazards()
        if hazards:  # nothing here should start one after Ready; said, never forked blind
            self._send(packets.ForkFailed(token, "; ".join(hazards)))
            return
        try:
            pid = fork_adopted(self._adopter)
        except OSError as error:
            self._send(packets.ForkFailed(token, f"fork failed: {error}"))
            return
        if pid == 0:
            self._become_protocol_process(environment)
        self._send(packets.Forked(token, pid))

    def _become_protocol_process(self, environment: dict[str, str]) -> None:
        """In the child: drop what is the parent's, serve as a protocol process, exit."""
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a fresh interpreter has it
            self._control.close()  # the supervisor sees EOF when the parent dies
            reseed_numpy()
            os.environ.clear()
            os.environ.update(environment)
            release_openmp(environment.get(OMP_NUM_THREADS))
            # Its command line is the parent's: its name (ps, top, /proc/PID/comm) says
            # which; so does /proc/PID/environ, the parent's, not its own.
            if environment.get(ROLE_ENV) == Role.MODEL_HOST.value:
                # The host loads its own models: the copies are the protocol processes'
                # (a copied model placed in the host after an eviction loads there).
                name_process(HOST_NAME)
            else:
                name_process(f"inferd-proto-{environment.get(PROTOCOL_INDEX_ENV, '')}")
                preloaded.offer(self._preloaded)
            child.serve_role(self._repository, forked=True)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
        except BaseException:
            logger.exception("A forked protocol process (or model host) failed")
            code = 1
        finally:
            logging.shutdown()
            os._exit(code)  # never back into the parent's loop, nor its atexit


def preload(settings: ServerSettings, left_out: list[str]) -> tuple[list[Model], str]:
    """Load each copied start-up model not ``left_out``; the models, and the label of
    one whose load broke a fork rule ("" when none did: then every model is here)."""
    if not settings.load_models_at_startup:
        return [], ""
    try:
        found = ModelRepository(Path(settings.model_repository_root)).find_all()
    except ConfigurationError:
        return [], ""  # each protocol process says what is wrong with the repository
    models: list[Model] = []
    placement = Placement.from_environment()  # inferd start's (host/placement.py)
    for model_settings in found:
        if not placement.copies(model_settings) or model_settings.label in left_out:
            continue
        model, hazard = _load_one(model_settings)
        if hazard:
            logger.warning(
                "The %s is loaded in each of the %d protocol processes instead of once, "
                "before they are forked (%s): it costs its memory and load time once per "
                "process",
                model_settings.label,
                settings.protocol_processes,
                hazard,
            )
            return models, model_settings.label
        if model is not None:
            models.append(model)
    return models, ""


def _load_one(settings: ModelSettings) -> tuple[Model | None, str]:
    """The loaded model (None if its load failed), and what makes forking unsafe now."""
    sockets_before = open_sockets()
    try:
        model = asyncio.run(load_model(settings))
    except Exception as error:
        logger.debug("%s did not load before the fork: %s", settings.label, error)
        return None, ""
    hazards = fork_hazards()
    if sockets := sockets_left_open(sockets_before):
        hazards.append(sockets)
    if not hazards and (openmp := openmp_hazard()):
        hazards.append(openmp)
    return model, "; ".join(hazards)


def main(argv: list[str] | None = None) -> None:
    """The parent started afresh (``python -m``): by a supervisor whose early fork was
    not safe, or that replaces a parent that died, or by a parent starting over."""
    supervisor_pid, repository, fd = (argv or sys.argv[1:])[:3]
    control = socket.socket(fileno=int(fd))
    serve_parent(int(supervisor_pid), repository, control)


def serve_parent(supervisor_pid: int, repository: str, control: socket.socket) -> None:
    """Load the copied models, then fork protocol processes until ``control`` closes.

    Runs in a fresh interpreter (:func:`main`) or in a process the supervisor forked
    before its event loop started (protocol_forks.fork_parent_early): then the
    imports are the supervisor's, shared with it, and no interpreter starts."""
    die_with_parent(supervisor_pid)
    oom_score.take_role(oom_score.PARENT)
    # The supervisor decides when it stops (by closing its socket), after its children.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.set_inheritable(control.fileno(), False)
    settings = load_server_settings(Path(repository), command_line=CommandLine.from_environment())
    configure_logging(settings)
    tag_process("protocol fork parent", 0)
    left_out = json.loads(os.environ.get(LEFT_OUT_ENV, "[]"))
    no_progress_monitor()
    openmp = hold_openmp()  # a team of one starts no pool: XGBoost, LightGBM stay forkable
    models, unsafe = preload(settings, left_out)
    if unsafe:  # start over without it: its threads or sockets must not reach a fork
        os.environ[LEFT_OUT_ENV] = json.dumps([*left_out, unsafe])
        release_openmp(openmp)  # the user's setting, for the next start to hold
        os.set_inheritable(control.fileno(), True)
        arguments = [str(supervisor_pid), repository, str(control.fileno())]
        logging.shutdown()
        os.execv(
            sys.executable, [sys.executable, "-m", "inferd.supervisor.protocol_parent", *arguments]
        )
    for name in SERVING_MODULES:
        with contextlib.suppress(ImportError):  # optional ones (uvloop): absent is fine
            importlib.import_module(name)
    gc.collect()
    gc.freeze()  # the collector never writes to the models' objects: their pages stay shared
    server = ProtocolForkServer(control, supervisor_pid, Path(repository), models)
    server.announce_ready()
    server.serve()
    exit_stopped(0)  # the supervisor waits for this exit, after the grace: no finalization


if __name__ == "__main__":
    main()
