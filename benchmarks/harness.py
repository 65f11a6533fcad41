"""The round loop every scenario shares: start, verify, warm up, measure, stop.

Each run gets fresh ports and a fresh repository, so no run inherits another's
warm caches or sockets; a contender that fails is reported and the others go on.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common.serverproc import ServerProcess, free_ports

from .loadgen import LoadResult
from .repository import settings_json, write_json
from .results import RunRecord, alternate, format_run
from .scenarios.base import Case, Scenario
from .servers import (
    AS_OPTION,
    Contender,
    group_cpu_seconds,
    main_thread_cpu_seconds,
    ready_path,
    ready_port,
    start,
)

# What a failed run may raise: the server (RuntimeError, TimeoutError), a load generator
# (RuntimeError), a check (VerificationError), a missing program (OSError, ValueError).
RUN_FAILURES = (RuntimeError, TimeoutError, OSError, ValueError)
FAILURE_CHARS = 4000  # a failure's message ends with the server's log: its tail is enough


def run_rounds(scenario: Scenario, work: Path) -> tuple[list[RunRecord], list[str]]:
    """Every case, round after round, its contenders in alternating order (with
    --start-once: round after round, each contender started once and driven through
    every case)."""
    if scenario.options.start_once:
        return run_rounds_started_once(scenario, work)
    records: list[RunRecord] = []
    failures: list[str] = []
    for case in scenario.cases():
        print(f"\n{case.name} ({case.load.name}):", flush=True)
        for round_index in range(scenario.options.rounds):
            for contender in alternate(case.contenders, round_index):
                what = f"{contender.label} round {round_index}"
                try:
                    record = run_one(scenario, case, contender, round_index, work)
                except RUN_FAILURES as error:
                    failures.append(failed(f"{case.name} {what}", error))
                    continue
                records.append(record)
                print(f"  {what:<24} {format_run(record)}", flush=True)
                warn_errors(what, record.result)
    return records, failures


def run_rounds_started_once(scenario: Scenario, work: Path) -> tuple[list[RunRecord], list[str]]:
    """Round after round, each contender (in alternating order) started once and
    measured at every case in turn: for servers that take minutes to start."""
    cases = scenario.cases()
    first = cases[0]
    if any(c.contenders != first.contenders or c.model != first.model for c in cases):
        raise SystemExit("--start-once needs cases that differ only in their load")
    records: list[RunRecord] = []
    failures: list[str] = []
    for round_index in range(scenario.options.rounds):
        for contender in alternate(first.contenders, round_index):
            what = f"{contender.label} round {round_index}"
            print(f"\n{what}, started once for {len(cases)} loads:", flush=True)
            try:
                with started(scenario, first, contender, round_index, work) as (server, startup):
                    for case in cases:
                        record = measure(scenario, case, contender, round_index, server, startup)
                        records.append(record)
                        print(f"  {case.name:<24} {format_run(record)}", flush=True)
                        warn_errors(f"{what} {case.name}", record.result)
            except RUN_FAILURES as error:
                failures.append(failed(what, error))
    return records, failures


def failed(what: str, error: Exception) -> str:
    message = str(error)[-FAILURE_CHARS:]
    print(f"  {what}: FAILED: {message}", file=sys.stderr, flush=True)
    return f"{what}: {message}"


def run_one(
    scenario: Scenario, case: Case, contender: Contender, round_index: int, work: Path
) -> RunRecord:
    with started(scenario, case, contender, round_index, work) as (server, startup):
        return measure(scenario, case, contender, round_index, server, startup)


@contextmanager
def started(
    scenario: Scenario, case: Case, contender: Contender, round_index: int, work: Path
) -> Iterator[tuple[ServerProcess, float]]:
    """``contender`` serving ``case``'s repository, ready: the server and its start-up
    seconds; stopped on leaving."""
    options = scenario.options
    ports = free_ports(3)
    repo = work / case.name.replace(" ", "-") / f"{contender.slug}-r{round_index}"
    layers = (
        {"parallel_workers": options.parallel_workers},
        scenario.settings,
        options.extra_settings,
        contender.settings,
    )
    write_json(repo / "settings.json", settings_json(ports, *layers))
    scenario.write_repository(repo, contender, case)
    processes = contender.protocol_processes
    processes = options.protocol_processes if processes == AS_OPTION else processes
    server = start(
        contender, options.programs, repo, ports, processes, own_session=not options.shared_session
    )
    try:
        startup = server.wait_until(
            ready_path(contender), timeout=options.ready_timeout, port=ready_port(contender, ports)
        )
        yield server, startup
    finally:
        server.stop()


def measure(
    scenario: Scenario,
    case: Case,
    contender: Contender,
    round_index: int,
    server: ServerProcess,
    startup: float,
) -> RunRecord:
    """Verify, warm up, then drive ``case``'s load at ``server`` for the run's duration."""
    options = scenario.options
    target = scenario.verify(server, contender, case)
    warm = case.load.run(target, options.warmup, None) if options.warmup > 0 else None
    if warm is not None:
        warn_errors(f"{contender.label} warm-up", warm)
    before = cpu_seconds(server)
    result = case.load.run(target, options.duration, warm.requests_per_s if warm else None)
    after = cpu_seconds(server)
    all_processes, main_thread = (
        per_request_us(begin, end, result.requests)
        for begin, end in zip(before, after, strict=True)
    )
    return RunRecord(
        case.name, contender.label, round_index, startup, result, all_processes, main_thread
    )


def cpu_seconds(server: ServerProcess) -> tuple[float | None, float | None]:
    """CPU seconds so far of the server's process group and of its main thread."""
    pid = server.process.pid  # the leader of its own process group
    return group_cpu_seconds(pid), main_thread_cpu_seconds(pid)


def per_request_us(begin: float | None, end: float | None, requests: int) -> float | None:
    if begin is None or end is None or not requests:
        return None
    return (end - begin) / requests * 1e6


def warn_errors(what: str, result: LoadResult) -> None:
    if result.errors:
        print(f"  WARNING {what}: {result.errors} errors: {result}", file=sys.stderr)
