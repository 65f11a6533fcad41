"""A side-by-side scenario (scenarios/): its servers in alternating rounds, the report.

Exit status: 0 ok, 1 a run did not complete, 2 errors during a measured run.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .harness import run_rounds
from .options import MLSERVER_PYTHON_ENV, Options, parse_options
from .results import (
    RunRecord,
    exit_status,
    format_ratio,
    format_table,
    ratio,
    summarize,
    unit_of,
)
from .scenarios import SCENARIOS, Scenario
from .servers import use_inferd_source


def processes_label(protocol_processes: int | None) -> str:
    """What inferd runs, said with every result (--protocol-processes)."""
    if protocol_processes is None:
        return "its default protocol processes (the CPUs it may use)"
    plural = "" if protocol_processes == 1 else "es"
    return f"{protocol_processes} protocol process{plural}"


def describe_setup(options: Options) -> dict[str, Any]:
    programs = options.programs
    return {
        "scenario": options.scenario,
        "argv": sys.argv[1:],
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "inferd_python": programs.inferd_python,
        "inferd_src": str(programs.inferd_src),
        "baseline_src": str(options.baseline_src) if options.baseline_src else None,
        "protocol_processes": options.protocol_processes,  # None: the server's default
        "mlserver_python": programs.mlserver_python,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "shared_session": options.shared_session,
        "note": "servers and load generator share all CPUs; nothing is pinned",
    }


def report(
    scenario: Scenario, records: list[RunRecord], failures: list[str], in_process: dict[str, Any]
) -> dict[str, Any]:
    """Print the tables and ratios; the JSON record of the whole run."""
    summary = summarize(records)
    ratios: dict[str, dict[str, Any]] = {}
    for case, rows in summary.items():
        unit = unit_of(records, case)
        print(f"\n{case} (medians over rounds):")
        print("\n".join(format_table(rows, unit)))
        for a, b in scenario.comparisons(list(rows)):
            values = ratio(records, rows, case, a, b)
            if values is not None:
                ratios.setdefault(case, {})[f"{a}/{b}"] = values
                print(format_ratio(a, b, values, unit))
    notes = scenario.notes(summary)
    if notes:
        print("\n" + "\n".join(notes))
    return {
        "setup": describe_setup(scenario.options),
        "in_process": in_process,
        "runs": [r.to_dict() for r in records],
        "failures": failures,
        "summary": summary,
        "ratios": ratios,
        "note": "medians over rounds (errors summed); ratios are a/b of those medians",
    }


def main(argv: Sequence[str]) -> int:
    """``python -m benchmarks SCENARIO [options]``: argv holds SCENARIO and its options."""
    options = parse_options(list(SCENARIOS.values()), argv)
    use_inferd_source(options.programs.inferd_src)
    scenario = SCENARIOS[options.scenario](options)
    print(scenario.describe())
    sessions = "this command's session" if options.shared_session else "a session each"
    print(
        f"servers and load share {os.cpu_count()} CPUs; nothing is pinned; servers in {sessions}",
        flush=True,
    )
    print(f"inferd runs {processes_label(options.protocol_processes)}", flush=True)
    if scenario.compares_mlserver and options.programs.mlserver_python is None:
        print(f"MLServer left out: pass --mlserver-python or set ${MLSERVER_PYTHON_ENV}")
    in_process = scenario.measure_in_process()
    for line in scenario.report_in_process(in_process):
        print(line, flush=True)
    with tempfile.TemporaryDirectory(prefix=f"inferd-bench-{options.scenario}-") as tmp:
        records, failures = run_rounds(scenario, options.work_dir or Path(tmp))
    result = report(scenario, records, failures, in_process)
    if options.json_out:
        options.json_out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return exit_status(records, failures)
