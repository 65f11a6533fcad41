"""The command line: ``python -m benchmarks <scenario> [options]``.

Options every scenario shares are defined here, with each scenario's defaults;
a scenario adds its own flags. Paths come from options or environment
variables, never from the code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .servers import CHECKOUT_SRC, INFERD, MLSERVER, Programs, resolve_source

MLSERVER_PYTHON_ENV = "INFERD_BENCH_MLSERVER_PYTHON"
ONLY_CHOICES = {"inferd": (INFERD,), "mlserver": (MLSERVER,), "both": (INFERD, MLSERVER)}


class ScenarioSpec(Protocol):
    """What the parser needs of a scenario class."""

    name: str
    description: str
    defaults: Mapping[str, Any]
    compares_mlserver: bool
    varies: frozenset[str]
    load_tool: str

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None: ...


@dataclass(frozen=True)
class Options:
    """What every scenario is given; ``args`` holds its own flags too."""

    scenario: str
    duration: float
    warmup: float
    rounds: int
    connections: tuple[int, ...]
    threads: int
    wrk_timeout: float
    ready_timeout: float
    parallel_workers: int
    extra_settings: Mapping[str, Any]
    servers: tuple[str, ...]  # the servers of an inferd-vs-MLServer comparison
    programs: Programs
    baseline_src: Path | None
    work_dir: Path | None
    json_out: Path | None
    args: argparse.Namespace
    protocol_processes: int | None = 1  # inferd's; None: its default (the CPUs)
    start_once: bool = False  # each contender started once a round for every case
    # The servers in this command's session (their own process group only); False: each
    # in a session of its own (common/serverproc.py spawn).
    shared_session: bool = False


def json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def protocol_processes_value(text: str) -> int | None:
    """A --protocol-processes value: a count >= 1, or ``default`` (None: left unset)."""
    if text == "default":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count >= 1 or 'default'")
    return int(text)


def add_common_arguments(parser: argparse.ArgumentParser, spec: ScenarioSpec) -> None:
    defaults = {"duration": 10.0, "warmup": 3.0, "rounds": 2, "connections": [16]}
    defaults |= {"parallel_workers": 0, **spec.defaults}
    add = parser.add_argument
    add("--duration", type=float, default=defaults["duration"], help="seconds per measured run")
    add("--warmup", type=float, default=defaults["warmup"], help="warm-up seconds (discarded)")
    add("--rounds", type=int, default=defaults["rounds"], help="the order alternates by round")
    add(
        "--connections",
        type=int,
        nargs="+",
        default=defaults["connections"],
        help="concurrent connections; several values: one comparison each",
    )
    add("--threads", type=int, default=1, help="load generator threads")
    add(
        "--start-once",
        action="store_true",
        help="start each server once a round and drive it at every --connections value in "
        "turn (for servers that take minutes to start; default: a fresh server per run)",
    )
    add(
        "--shared-session",
        action="store_true",
        help="start the servers in this command's session (a process group of their own) "
        "rather than each in a session of its own: under Linux's autogroup scheduling a "
        "session is a scheduling group, so a server's busy processes (vLLM's engine) then "
        "share the CPUs with the load generator thread by thread instead of splitting one "
        "session's share with its own front end (default: a session each, as the recorded "
        "figures ran)",
    )
    if spec.load_tool == "wrk":
        add("--wrk-timeout", type=float, default=10.0, help="wrk's per-request timeout, s")
    add("--ready-timeout", type=float, default=120.0, help="server start deadline, s")
    if "parallel_workers" not in spec.varies:
        add(
            "--parallel-workers",
            type=int,
            default=defaults["parallel_workers"],
            help="parallel_workers in settings.json",
        )
    add(
        "--protocol-processes",
        type=protocol_processes_value,
        default=1,
        metavar="N|default",
        help="inferd's protocol_processes (1: one process, as MLServer and the recorded "
        "figures run; 'default': the CPUs it may use), through INFERD_PROTOCOL_PROCESSES, "
        "which a --baseline-src tree without the setting ignores",
    )
    add(
        "--extra-settings",
        type=json_object,
        default={},
        help="JSON object merged into settings.json, e.g. '{\"debug\": false}'",
    )
    add_source_arguments(parser, baseline=True)
    if spec.compares_mlserver:
        add(
            "--mlserver-python",
            default=os.environ.get(MLSERVER_PYTHON_ENV),
            help=f"a Python with mlserver 1.7.1 installed (or ${MLSERVER_PYTHON_ENV})",
        )
        add(
            "--only",
            choices=sorted(ONLY_CHOICES),
            help="servers to run (default: both when MLServer's Python is known)",
        )
    add_output_arguments(parser, json_out=None)


def add_source_arguments(
    parser: argparse.ArgumentParser, baseline: bool = False, python: bool = True
) -> None:
    """What every command measures: which inferd, run by which Python (and its baseline)."""
    add = parser.add_argument
    if python:
        add("--inferd-python", default=sys.executable, help="runs inferd (default: this Python)")
    add(
        "--inferd-src",
        type=Path,
        default=CHECKOUT_SRC,
        help="the inferd sources measured (default: this checkout's src)",
    )
    if baseline:
        add(
            "--baseline-src",
            type=Path,
            metavar="PATH",
            help="also run inferd from this checkout (PYTHONPATH=PATH/src), side by side",
        )


def add_output_arguments(parser: argparse.ArgumentParser, json_out: Path | None) -> None:
    """Where every command keeps its servers' files and writes its figures."""
    add = parser.add_argument
    add("--work-dir", type=Path, help="keep repositories and server logs (default: a temp dir)")
    add_json_out(parser, json_out)


def add_json_out(parser: argparse.ArgumentParser, json_out: Path | None = None) -> None:
    """``--json-out``: the figures as JSON, in the one shape of ``results.py``."""
    where = f" (default: {json_out})" if json_out else ""
    help_text = f"every run and summary, as JSON{where}"
    parser.add_argument("--json-out", type=Path, default=json_out, help=help_text)


def build_parser(specs: Sequence[ScenarioSpec]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="inferd benchmarks, side by side with the servers they compare to.",
    )
    subparsers = parser.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    for spec in specs:
        summary = spec.description.splitlines()[0]
        sub = subparsers.add_parser(
            spec.name,
            help=summary,
            description=spec.description,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_common_arguments(sub, spec)
        spec.add_arguments(sub)
    return parser


def choose_servers(only: str | None, mlserver_python: str | None) -> tuple[str, ...]:
    """--only, or both servers when MLServer's Python is known (else inferd alone)."""
    if only is None:
        return ONLY_CHOICES["both" if mlserver_python else "inferd"]
    servers = ONLY_CHOICES[only]
    if MLSERVER in servers and not mlserver_python:
        raise ValueError(f"--only {only} needs --mlserver-python or ${MLSERVER_PYTHON_ENV}")
    return servers


def executable(option: str, path: str | None) -> str | None:
    """``path`` made absolute (servers start in other folders), or None: a relative
    path found here would not be found from a server's own folder. Not resolved: a
    virtualenv's python is a link that must stay inside the virtualenv."""
    if path is None:
        return None
    found = shutil.which(path)
    if found is None:
        raise ValueError(f"{option} {path}: no such executable")
    return os.path.abspath(found)


def spec_of(specs: Sequence[ScenarioSpec], name: str) -> ScenarioSpec:
    return next(spec for spec in specs if spec.name == name)


def check_counts(args: argparse.Namespace, load_tool: str) -> None:
    if min(args.connections) < 1 or args.rounds < 0 or args.duration <= 0 or args.warmup < 0:
        raise ValueError("--connections must be >= 1, --rounds and --warmup >= 0, --duration > 0")
    if load_tool == "wrk" and not (args.duration.is_integer() and args.warmup.is_integer()):
        raise ValueError("wrk runs whole seconds: --duration and --warmup must be whole numbers")


def parse_options(specs: Sequence[ScenarioSpec], argv: Sequence[str] | None = None) -> Options:
    parser = build_parser(specs)
    args = parser.parse_args(argv)
    mlserver_python = getattr(args, "mlserver_python", None)
    try:
        servers = choose_servers(getattr(args, "only", None), mlserver_python)
        if MLSERVER in servers:
            mlserver_python = executable("--mlserver-python", mlserver_python)
        pythons = {
            name: executable(f"--{name.replace('_', '-')}", getattr(args, name, None))
            for name in ("inferd_python", "litserve_python", "vllm_python", "triton_python")
        }
        inferd_src = resolve_source(args.inferd_src)
        baseline = resolve_source(args.baseline_src) if args.baseline_src else None
        check_counts(args, spec_of(specs, args.scenario).load_tool)
    except ValueError as error:
        parser.error(str(error))
    programs = Programs(
        inferd_python=pythons["inferd_python"] or sys.executable,
        inferd_src=inferd_src,
        mlserver_python=mlserver_python,
        pyvoy=getattr(args, "envoy_floor", None),
        litserve_python=pythons["litserve_python"],
        vllm_python=pythons["vllm_python"],
        triton_python=pythons["triton_python"],
    )
    return Options(
        scenario=args.scenario,
        duration=args.duration,
        warmup=args.warmup,
        rounds=args.rounds,
        connections=tuple(args.connections),
        threads=args.threads,
        wrk_timeout=getattr(args, "wrk_timeout", 10.0),
        ready_timeout=args.ready_timeout,
        parallel_workers=getattr(args, "parallel_workers", 0),
        extra_settings=args.extra_settings,
        servers=servers,
        programs=programs,
        baseline_src=baseline,
        work_dir=args.work_dir,
        json_out=args.json_out,
        args=args,
        protocol_processes=args.protocol_processes,
        start_once=args.start_once,
        shared_session=args.shared_session,
    )


def command_parser(name: str, description: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m benchmarks NAME``, its help text the command's docstring."""
    return argparse.ArgumentParser(
        prog=f"python -m benchmarks {name}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
