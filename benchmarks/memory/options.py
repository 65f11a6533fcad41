"""The command line of ``python -m benchmarks memory``: servers, worker counts, model."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..options import (
    MLSERVER_PYTHON_ENV,
    ONLY_CHOICES,
    add_output_arguments,
    add_source_arguments,
    choose_servers,
    command_parser,
    executable,
)
from ..repository import SKLEARN_IMPLEMENTATION
from ..servers import INFERD, MLSERVER, Contender, resolve_source

NAME = "memory"
DEFAULT_JSON_OUT = Path("bench-results") / "memory.json"  # /bench-results/ is git-ignored
INFERD_SKLEARN = "inferd.runtimes.sklearn.SKLearnModel"
INFERD_RUNTIME_LABEL = "inferd-runtime"  # inferd serving its own runtime's name
INFERD_FORK_LABEL = "inferd-fork"  # inferd with fork_workers on
# inferd with fork_protocol_processes off: each protocol process loads the model
INFERD_SPAWN_LABEL = "inferd-spawn"
# How inferd loads the model on the protocol_processes axis (--loads): at its start,
# or after it, through the repository API, by the repository poll, on a first request
# (each a server labelled "inferd-<way>").
START, API, POLL, REQUEST = "start", "api", "poll", "request"
LOADS = (START, API, POLL, REQUEST)


@dataclass(frozen=True)
class MemoryServer:
    """A server in the comparison and the implementation its model folder names."""

    label: str
    kind: str  # INFERD or MLSERVER
    implementation: str
    fork_workers: bool = False  # inferd's fork_workers setting on
    fork_protocol_processes: bool = True  # inferd's setting of that name
    load: str = START  # how the model is loaded (LOADS)

    @property
    def contender(self) -> Contender:
        return Contender(self.label, self.kind)


@dataclass(frozen=True)
class MemoryOptions:
    servers: tuple[MemoryServer, ...]
    workers: tuple[int, ...]  # parallel_workers values, one run of each server each
    rounds: int
    requests_per_worker: int  # answered (and checked) after READY, before the PSS
    trees: int
    rows: int
    ready_timeout: float
    inferd_python: str
    inferd_src: Path
    mlserver_python: str | None
    work_dir: Path | None
    json_out: Path
    # The axis is inferd's protocol_processes (parallel_workers left to its default,
    # so the model is copied into each process) rather than parallel_workers;
    # MLServer's counterpart stays parallel_workers.
    protocol_axis: bool = False

    @property
    def axis(self) -> str:
        return "protocol_processes" if self.protocol_axis else "parallel_workers"


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(NAME, sys.modules[__package__ or __name__].__doc__)
    add = parser.add_argument
    add("--workers", type=int, nargs="+", default=[1, 2, 4], metavar="P",
        help="parallel_workers values (default 1 2 4; on 16 cores: 1 2 4 8 12)")  # fmt: skip
    add("--rounds", type=int, default=1, help="repeat every run (the order alternates)")
    add("--requests", type=int, default=8, metavar="N",
        help="requests per worker answered and checked before the PSS is read")  # fmt: skip
    add("--trees", type=int, default=60, help="trees of the RandomForest")
    add("--rows", type=int, default=40_000, help="rows the RandomForest is trained on")
    add("--inferd-runtime", action="store_true",
        help=f"also inferd with the model under {INFERD_SKLEARN}")  # fmt: skip
    add("--fork-workers", action="store_true",
        help="also inferd with fork_workers on (workers forked from one loaded model)")  # fmt: skip
    add("--protocol-processes", action="store_true",
        help="vary inferd's protocol_processes instead (parallel_workers left to its "
        "default; MLServer still varies parallel_workers)")  # fmt: skip
    add("--loads", nargs="+", choices=LOADS, default=[START],
        help="with --protocol-processes: how inferd loads the model (default start; "
        "api, poll and request load it after the start, each a server of its own)")  # fmt: skip
    add("--only", choices=sorted(ONLY_CHOICES),
        help="servers to run (default: both when MLServer's Python is known)")  # fmt: skip
    add("--mlserver-python", default=os.environ.get(MLSERVER_PYTHON_ENV),
        help=f"a Python with mlserver-sklearn 1.7.1 (or ${MLSERVER_PYTHON_ENV})")  # fmt: skip
    add("--ready-timeout", type=float, default=180.0, help="deadline to the model READY, s")
    add_source_arguments(parser)
    add_output_arguments(parser, json_out=DEFAULT_JSON_OUT)
    return parser


def parse(argv: Sequence[str]) -> MemoryOptions:
    """The options, or exit 2 naming what was wrong."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _options(args)
    except ValueError as error:
        parser.error(str(error))


def _options(args: argparse.Namespace) -> MemoryOptions:
    if args.protocol_processes and min(args.workers) < 1:
        raise ValueError("--workers are protocol_processes with --protocol-processes: >= 1")
    if min(args.workers) < 0 or args.rounds < 1 or args.requests < 1:
        raise ValueError("--workers must be >= 0, --rounds and --requests >= 1")
    if args.trees < 1 or args.rows < 10:
        raise ValueError("--trees must be >= 1 and --rows >= 10")
    kinds = choose_servers(args.only, args.mlserver_python)
    inferd_python = executable("--inferd-python", args.inferd_python) or sys.executable
    mlserver_python = executable(
        "--mlserver-python", args.mlserver_python if MLSERVER in kinds else None
    )
    if mlserver_python is not None:
        check_mlserver_sklearn(mlserver_python)
    return MemoryOptions(
        servers=servers_of(
            kinds, args.inferd_runtime, args.fork_workers, args.protocol_processes, args.loads
        ),
        workers=tuple(dict.fromkeys(args.workers)),
        rounds=args.rounds,
        requests_per_worker=args.requests,
        trees=args.trees,
        rows=args.rows,
        ready_timeout=args.ready_timeout,
        inferd_python=inferd_python,
        inferd_src=resolve_source(args.inferd_src),
        mlserver_python=mlserver_python,
        work_dir=args.work_dir,
        json_out=args.json_out,
        protocol_axis=args.protocol_processes,
    )


def servers_of(
    kinds: Sequence[str],
    inferd_runtime: bool,
    fork_workers: bool = False,
    protocol_axis: bool = False,
    loads: Sequence[str] = (START,),
) -> tuple[MemoryServer, ...]:
    """Each server kind under MLServer's runtime name (the same folder for both), and
    inferd under its own runtime's name, and with fork_workers on, too when asked; on
    the protocol_processes axis, inferd with fork_protocol_processes off too (with the
    load at start alone), and inferd loading the model after its start each way of
    ``loads``."""
    servers = [MemoryServer(kind, kind, SKLEARN_IMPLEMENTATION) for kind in kinds]
    if protocol_axis and INFERD in kinds:
        later = [
            MemoryServer(f"{INFERD}-{load}", INFERD, SKLEARN_IMPLEMENTATION, load=load)
            for load in loads
            if load != START
        ]
        spawned = MemoryServer(
            INFERD_SPAWN_LABEL, INFERD, SKLEARN_IMPLEMENTATION, fork_protocol_processes=False
        )
        at_start = [spawned] if START in loads else []
        index = kinds.index(INFERD)
        servers[index + 1 : index + 1] = [*at_start, *later]
        if START not in loads:
            del servers[index]
    if fork_workers and INFERD in kinds:
        forked = MemoryServer(INFERD_FORK_LABEL, INFERD, SKLEARN_IMPLEMENTATION, True)
        servers.insert(kinds.index(INFERD) + 1, forked)
    if inferd_runtime and INFERD in kinds:
        servers.insert(1, MemoryServer(INFERD_RUNTIME_LABEL, INFERD, INFERD_SKLEARN))
    return tuple(servers)


def check_mlserver_sklearn(python: str) -> None:
    """ValueError when MLServer's Python cannot import its sklearn runtime (a venv made
    with mlserver alone, as CI's is)."""
    done = subprocess.run(
        [python, "-c", "import mlserver_sklearn"], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise ValueError(
            f"{python} cannot import mlserver_sklearn: pip install 'mlserver-sklearn==1.7.1' "
            f"there ({done.stderr.strip().splitlines()[-1:]})"
        )
