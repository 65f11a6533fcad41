"""What each of the server's processes costs in memory, for ``metrics_port``.

With several protocol processes the supervisor's metrics answer gains two gauges,
one sample per process: ``server_process_pss_bytes`` (proportional set size: a page
shared by N processes counts 1/N in each, so the samples add up to what the server
costs) and ``server_process_uss_bytes`` (its private pages: what stopping it would
free), labelled with the process's ``role`` (``supervisor``, ``protocol_fork_parent``,
``protocol_process``, ``model_host``, ``worker``: the model host's worker processes)
and ``pid``. Read from ``/proc/<pid>/smaps_rollup`` at each scrape (Linux only;
elsewhere, or for a process gone meanwhile, no sample).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from inferd.supervisor.exposition import Family

PSS = "server_process_pss_bytes"
USS = "server_process_uss_bytes"
WORKER = "worker"


def memory_of(pid: int) -> tuple[int, int] | None:
    """``pid``'s PSS and USS in bytes; None if it cannot be read."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        name, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * 1024  # "1234 kB"
    pss = fields.get("Pss", 0) + fields.get("SwapPss", 0)
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return pss, uss


def children_of(pid: int) -> list[int]:
    """``pid``'s child processes (the kernel's list; [] where it has none)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def memory_families(processes: Iterable[tuple[str, int]]) -> list[Family]:
    """The two gauges for these ``(role, pid)`` processes, the model host's workers added."""
    pss = Family(PSS, "gauge", _header(PSS, "Proportional set size of each server process"))
    uss = Family(USS, "gauge", _header(USS, "Private memory (USS) of each server process"))
    for role, pid in _with_workers(processes):
        memory = memory_of(pid)
        if memory is None:
            continue
        series = f'{{role="{role}",pid="{pid}"}}'
        pss.samples[PSS + series] = (float(memory[0]), "")
        uss.samples[USS + series] = (float(memory[1]), "")
    return [pss, uss]


def _with_workers(processes: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    listed = list(processes)
    hosts = [pid for role, pid in listed if role == "model_host"]
    return listed + [(WORKER, child) for host in hosts for child in children_of(host)]


def _header(name: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
