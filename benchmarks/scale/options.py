"""The command line of ``python -m benchmarks scale``: cores, layouts, models, protocols.

A *layout* is what serves during a window: one inferd server with some
``parallel_workers`` (``1 x 4``), or K independent servers, each its own process
tree with its own ports (``12 x 0``: the shared-nothing replicas whose total is
the ceiling one server is measured against). The parsing is kept pure, so it is
tested without servers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..options import add_output_arguments, add_source_arguments, command_parser
from ..servers import resolve_source

NAME = "scale"
MODELS = ("light", "heavy", "mlp")
DEFAULT_MODELS = ("light", "heavy")  # mlp on demand: it answers issue 27's GPU question
PROTOCOLS = ("rest", "grpc")
DEFAULT = "default"  # a --workers value: settings.json leaves parallel_workers out
PROTOCOL_PROCESSES = "protocol_processes"
DEFAULT_JSON_OUT = Path("bench-results") / "scale.json"  # /bench-results/ is git-ignored
LOAD_SHARE = 4  # with enough cores, a quarter of them (at least one) run the load


@dataclass(frozen=True)
class Layout:
    """``servers`` inferd servers, each with ``workers`` parallel_workers (None: the
    server's default) and ``settings`` added to its settings.json."""

    servers: int
    workers: int | None
    settings: Mapping[str, Any]
    replicas: bool  # shared-nothing replicas: the ceiling one server is measured against

    @property
    def label(self) -> str:
        workers = DEFAULT if self.workers is None else str(self.workers)
        extra = "".join(f" {key}={json.dumps(value)}" for key, value in self.settings.items())
        return f"{self.servers} x {workers}{extra}"

    def settings_json(self) -> dict[str, Any]:
        """What each server's settings.json gets besides its ports."""
        workers = {} if self.workers is None else {"parallel_workers": self.workers}
        return workers | dict(self.settings)

    @property
    def protocol_processes(self) -> int | None:
        """What each server is told through the environment: a replica is one process
        (the shared-nothing unit, whatever the CPUs say) unless its settings say
        otherwise; one server keeps its settings.json or the server's default (None).
        The environment, not settings.json, so a tree without the setting still starts."""
        return 1 if self.replicas and PROTOCOL_PROCESSES not in self.settings else None


@dataclass(frozen=True)
class CorePlan:
    """The cores the servers and the load generators may run on."""

    server: tuple[int, ...]
    load: tuple[int, ...]
    available: tuple[int, ...]  # this process's CPU affinity

    @property
    def shared(self) -> bool:
        return bool(set(self.server) & set(self.load))

    def pin(self, cores: tuple[int, ...]) -> tuple[int, ...] | None:
        """The cores to pin a process to; None where that would change nothing."""
        return None if set(cores) == set(self.available) else cores

    def describe(self) -> str:
        server, load = format_cpus(self.server), format_cpus(self.load)
        if self.shared:
            return (
                f"servers on cores {server}, load on cores {load}: they SHARE cores "
                f"({len(self.available)} available), so the load takes CPU from the servers"
            )
        return f"servers pinned to cores {server}, load generators to cores {load}"


@dataclass(frozen=True)
class ScaleOptions:
    cores: CorePlan
    layouts: tuple[Layout, ...]
    models: tuple[str, ...]
    protocols: tuple[str, ...]
    duration: int  # seconds per measured window
    warmup: int  # seconds of load before each window, not measured
    rounds: int  # every layout once per round; the order reverses between rounds
    connections: int  # per layout, split evenly over its servers
    load_threads: int  # per layout, at least one per server
    heavy_trees: int
    mlp_call_ms: float
    mlp_row_ms: float
    ready_timeout: float
    inferd_python: str
    inferd_src: Path
    work_dir: Path | None
    json_out: Path


def parse_cpus(text: str) -> tuple[int, ...]:
    """``"0-11,14"`` -> (0, 1, ..., 11, 14): sorted, each once."""
    cores: set[int] = set()
    try:
        for part in text.split(","):
            first, dash, last = part.strip().partition("-")
            low = int(first)
            high = int(last) if dash else low
            if low < 0 or high < low:
                raise ValueError
            cores.update(range(low, high + 1))
    except ValueError:
        raise ValueError(f"{text!r} is not a list of cores such as 0-11 or 0,2,4") from None
    return tuple(sorted(cores))


def format_cpus(cores: Sequence[int]) -> str:
    """(0, 1, 2, 5) -> ``"0-2,5"``."""
    ranges: list[list[int]] = []
    for core in sorted(cores):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def plan_cores(server: str | None, load: str | None, available: Sequence[int]) -> CorePlan:
    """The cores asked for, or a split: a quarter of the cores (at least one) for the
    load when there are 4 or more, else every core for both (shared)."""
    every = tuple(sorted(available))
    servers = parse_cpus(server) if server else None
    loads = parse_cpus(load) if load else None
    for option, cores in (("--server-cores", servers), ("--load-cores", loads)):
        if cores and not set(cores) <= set(every):
            raise ValueError(f"{option}: cores {format_cpus(cores)} are not all available to "
                             f"this process (it may use {format_cpus(every)})")  # fmt: skip
    if servers is None and loads is None:
        if len(every) < LOAD_SHARE:
            return CorePlan(every, every, every)
        cut = len(every) - len(every) // LOAD_SHARE
        return CorePlan(every[:cut], every[cut:], every)
    servers = servers or tuple(c for c in every if c not in set(loads or ())) or every
    loads = loads or tuple(c for c in every if c not in set(servers)) or servers
    return CorePlan(servers, loads, every)


def parse_workers(token: str) -> int | None:
    """A --workers value: a parallel_workers count, or ``default`` (left unset)."""
    return None if token == DEFAULT else _count(token, "--workers", minimum=0)


def parse_replicas(token: str) -> tuple[int, int]:
    """A --replicas value: ``K`` (K servers of parallel_workers 0) or ``KxP``."""
    servers, _, workers = token.lower().partition("x")
    return _count(servers, "--replicas", minimum=1), _count(workers or "0", "--replicas", 0)


def parse_setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``: VALUE as JSON where it parses (4, true, "x", [..]), else a string."""
    key, sign, raw = text.partition("=")
    if not sign or not key.strip():
        raise ValueError(f"{text!r}: a setting is KEY=VALUE, e.g. protocol_processes=4")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def _count(token: str, option: str, minimum: int) -> int:
    try:
        value = int(token)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{option}: {token!r} is not a whole number >= {minimum}")
    return value


def parse_processes(token: str) -> dict[str, int]:
    """A --protocol-processes value as settings.json entries: ``default`` none."""
    if token == DEFAULT:
        return {}
    return {PROTOCOL_PROCESSES: _count(token, "--protocol-processes", minimum=1)}


def build_layouts(
    workers: Sequence[str],
    replicas: Sequence[str],
    server_settings: Mapping[str, Any],
    replica_settings: Mapping[str, Any],
    processes: Sequence[str] = (DEFAULT,),
) -> tuple[Layout, ...]:
    """One server per --workers and --protocol-processes value (with --server-setting),
    then the replicas."""
    single = [
        Layout(1, parse_workers(w), {**server_settings, **parse_processes(p)}, False)
        for w in workers
        for p in processes
    ]
    shared_nothing = [
        Layout(k, p, replica_settings, True) for k, p in (parse_replicas(r) for r in replicas)
    ]
    # Each once, in order (a label says everything a layout is).
    layouts = tuple({layout.label: layout for layout in single + shared_nothing}.values())
    if not layouts:
        raise ValueError("nothing to measure: give --workers and/or --replicas values")
    return layouts


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(NAME, sys.modules[__package__ or __name__].__doc__)
    add = parser.add_argument
    add("--server-cores", metavar="CPUS", help="cores of the servers, e.g. 0-11 (default: "
        "all but a quarter with 4+ cores, else all)")  # fmt: skip
    add("--load-cores", metavar="CPUS", help="cores of the load generators, e.g. 12-15 "
        "(default: the other cores, else all)")  # fmt: skip
    add("--workers", nargs="*", default=[DEFAULT, "0"], metavar="P",
        help="one server per value: parallel_workers P, or 'default' (unset)")  # fmt: skip
    add("--replicas", nargs="*", metavar="K[xP]",
        help="K independent servers of parallel_workers P (default 0) each "
        "(default: one per server core, at least 2; --replicas alone: none)")  # fmt: skip
    add("--protocol-processes", nargs="+", default=[DEFAULT], metavar="N",
        help="one server per value and --workers value: protocol_processes N, or "
        "'default' (unset: the CPUs the server may use); replicas run 1 each")  # fmt: skip
    add("--server-setting", action="append", default=[], metavar="KEY=VALUE",
        help="settings.json entry for the one-server layouts (repeatable)")  # fmt: skip
    add("--replica-setting", action="append", default=[], metavar="KEY=VALUE",
        help="settings.json entry for each replica (repeatable)")  # fmt: skip
    add("--models", nargs="+", choices=MODELS, default=list(DEFAULT_MODELS))
    add("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    add("--duration", type=int, default=5, help="seconds per measured window")
    add("--warmup", type=int, default=1, help="seconds of load before each window")
    add("--rounds", type=int, default=1, help="repeat every layout (the order reverses)")
    add("--connections", type=int, help="connections per layout, split over its servers "
        "(default: 4 per server core, at least 16)")  # fmt: skip
    add("--load-threads", type=int, help="load generator threads per layout, at least one "
        "per server (default: one per load core when apart, else 1)")  # fmt: skip
    add("--heavy-trees", type=int, default=200, help="trees of the heavy RandomForest")
    add("--mlp-call-ms", type=float, default=1.0, help="the mlp's device time per call, ms")
    add("--mlp-row-ms", type=float, default=0.02, help="the mlp's device time per row, ms")
    add("--ready-timeout", type=float, default=180.0, help="server start deadline, s")
    add_source_arguments(parser)
    add_output_arguments(parser, json_out=DEFAULT_JSON_OUT)
    return parser


def parse(argv: Sequence[str], available: Sequence[int] | None = None) -> ScaleOptions:
    """The options, or exit 2 naming what was wrong."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _options(args, sorted(available or os.sched_getaffinity(0)))
    except ValueError as error:
        parser.error(str(error))


def _options(args: argparse.Namespace, available: Sequence[int]) -> ScaleOptions:
    if args.duration < 1 or args.warmup < 0 or args.rounds < 1 or args.heavy_trees < 1:
        raise ValueError("--duration, --rounds and --heavy-trees must be >= 1, --warmup >= 0")
    if args.mlp_call_ms < 0 or args.mlp_row_ms < 0:
        raise ValueError("--mlp-call-ms and --mlp-row-ms must be >= 0")
    cores = plan_cores(args.server_cores, args.load_cores, available)
    replicas = args.replicas if args.replicas is not None else [f"{max(2, len(cores.server))}x0"]
    layouts = build_layouts(
        args.workers,
        replicas,
        dict(map(parse_setting, args.server_setting)),
        dict(map(parse_setting, args.replica_setting)),
        args.protocol_processes,
    )
    connections = args.connections or max(16, 4 * len(cores.server))
    threads = args.load_threads or (1 if cores.shared else len(cores.load))
    if connections < max(layout.servers for layout in layouts) or threads < 1:
        raise ValueError("--connections must be at least the most servers of a layout, "
                         "--load-threads at least 1")  # fmt: skip
    return ScaleOptions(
        cores=cores,
        layouts=layouts,
        models=tuple(dict.fromkeys(args.models)),
        protocols=tuple(dict.fromkeys(args.protocols)),
        duration=args.duration,
        warmup=args.warmup,
        rounds=args.rounds,
        connections=connections,
        load_threads=threads,
        heavy_trees=args.heavy_trees,
        mlp_call_ms=args.mlp_call_ms,
        mlp_row_ms=args.mlp_row_ms,
        ready_timeout=args.ready_timeout,
        inferd_python=args.inferd_python,
        inferd_src=resolve_source(args.inferd_src),
        work_dir=args.work_dir,
        json_out=args.json_out,
    )
