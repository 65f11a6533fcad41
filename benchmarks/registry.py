"""Every command of ``python -m benchmarks``, in one table.

Two kinds share the table. The side-by-side scenarios (``scenarios/``, registered in
``scenarios.SCENARIOS``) run their servers in alternating rounds through one harness
and share their options (``options.py``). The other commands measure one thing their
own way (a soak, pinned replicas, memory, a cost without a transport); each module has
a ``main(argv)`` and builds its parser with ``options.command_parser``. Modules are
imported when their command runs, so that ``--inferd-src`` is chosen before inferd is
imported.

The helper processes the scenarios start, and no one else, keep a ``__main__`` of their
own: ``HELPER_PROCESSES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass

from .pertree import run_per_tree, split_baseline
from .scenarios import SCENARIOS


@dataclass(frozen=True)
class Command:
    name: str
    module: str  # holds main(argv) -> int | None
    summary: str
    takes_source: bool = False  # has --inferd-src (else the tree on PYTHONPATH is measured)
    own_baseline: bool = False  # alternates --baseline-src's tree itself (else pertree.py)


SIDE_BY_SIDE = "benchmarks.sidebyside"

COMMANDS: tuple[Command, ...] = (
    *(
        Command(name, SIDE_BY_SIDE, " ".join(scenario.description.split("\n\n")[0].split()))
        for name, scenario in SCENARIOS.items()
    ),
    Command(
        "soak",
        "benchmarks.soak",
        "inferd alone, long: nothing grows (memory, fds, threads)",
        takes_source=True,
    ),
    Command(
        "scale",
        "benchmarks.scale",
        "one server against K independent ones, pinned",
        takes_source=True,
    ),
    Command(
        "memory",
        "benchmarks.memory",
        "the PSS and start-up of each added worker",
        takes_source=True,
    ),
    Command(
        "host-ceiling",
        "benchmarks.host_ceiling",
        "the model host's ceiling: pre-packed requests straight to its socket",
    ),
    Command(
        "process-cpu",
        "benchmarks.process_cpu",
        "a request's CPU, process by process",
        own_baseline=True,
    ),
    Command(
        "mlmodel-path",
        "benchmarks.mlmodel_path",
        "an MLServer MLModel runtime's CPU per request, without a transport",
    ),
    Command("stream-path", "benchmarks.stream_path", "inferd's cost per streamed response"),
    Command(
        "load-on-request",
        "benchmarks.load_on_request",
        "a cold request with load_on_request, and random access under a budget",
    ),
    Command(
        "restart-overload",
        "benchmarks.restart_overload",
        "overload after a worker restart: the queue bound still holds",
    ),
    Command("plot", "benchmarks.plot", "a --json-out file drawn as inferd bench --plot draws"),
)

# Started by the scenarios as processes of their own (``python benchmarks/NAME.py`` or
# ``python -m benchmarks.NAME``): not commands.
HELPER_PROCESSES = (
    "grpc_floor_server",
    "grpc_floor_asgi",
    "litserve_chat",
    "streamclient",
    "tracing_asgi",
)


def find(name: str) -> Command | None:
    return next((command for command in COMMANDS if command.name == name), None)


def listing() -> str:
    width = max(len(command.name) for command in COMMANDS)
    return "\n".join(f"{command.name:<{width}}  {command.summary}" for command in COMMANDS)


def run(name: str, argv: Sequence[str]) -> int:
    """Run the command ``name`` with its options ``argv``; its exit status."""
    command = find(name)
    if command is None:
        raise KeyError(name)
    if command.module != SIDE_BY_SIDE and not command.own_baseline:  # else in its own rounds
        baseline, rest = split_baseline(argv)
        if baseline is not None:
            return run_per_tree(name, rest, baseline, command.takes_source)
    main = importlib.import_module(command.module).main
    args = [name, *argv] if command.module == SIDE_BY_SIDE else list(argv)
    status = main(args)
    return 0 if status is None else int(status)
