"""CPU of the servers' process trees over a window, from /proc (Linux).

A server leads its own process group and its workers and protocol processes stay
in it, so one pass over /proc gives, per server, the CPU seconds of its whole
group, of its main process (all of its threads) and of each of its processes: with
several protocol processes the main one is a supervisor, and the busiest process
is the one that says whether one process is the limit.
``/proc/stat`` gives the whole machine's busy time: on a shared machine it shows
how much else was running.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSnapshot:
    at: float  # time.monotonic()
    groups: dict[int, tuple[float, float]]  # pgid -> (group CPU s, main process CPU s)
    machine: tuple[int, int] | None  # (busy ticks, all ticks) of every core
    processes: dict[int, dict[int, float]] = field(default_factory=dict)  # pgid -> pid -> s


@dataclass(frozen=True)
class CpuWindow:
    seconds: float
    group_s: list[float]  # per server: CPU seconds of its process group
    main_s: list[float]  # per server: CPU seconds of its main process
    machine_cores_busy: float | None  # all processes of the machine, in cores
    busiest_s: list[float] = field(default_factory=list)  # per server: its busiest process

    @property
    def cores_busy(self) -> float:
        """The servers' CPU over the window, in cores."""
        return sum(self.group_s) / self.seconds if self.seconds else 0.0

    @property
    def busiest_main_share(self) -> float:
        """The busiest main process's CPU, as a share of one core."""
        return max(self.main_s, default=0.0) / self.seconds if self.seconds else 0.0

    @property
    def busiest_share(self) -> float:
        """The busiest process of any server (its main one where no process was read),
        as a share of one core: at 100% that process is the limit."""
        busiest = self.busiest_s or self.main_s
        return max(busiest, default=0.0) / self.seconds if self.seconds else 0.0


def stat_fields(text: str) -> tuple[int, int, int]:
    """(process group, user+system ticks, pid) from a /proc/<pid>/stat line."""
    pid = int(text.split(" ", 1)[0])
    fields = text.rsplit(")", 1)[1].split()  # past the command name, which may hold spaces
    return int(fields[2]), int(fields[11]) + int(fields[12]), pid


def snapshot(pgids: Sequence[int]) -> CpuSnapshot:
    wanted = set(pgids)
    ticks = {pgid: [0, 0] for pgid in pgids}
    per_process: dict[int, dict[int, int]] = {pgid: {} for pgid in pgids}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            group, used, pid = stat_fields((entry / "stat").read_text())
        except (OSError, IndexError, ValueError):
            continue  # the process ended meanwhile
        if group in wanted:
            ticks[group][0] += used
            ticks[group][1] += used if pid == group else 0
            per_process[group][pid] = used
    hertz = os.sysconf("SC_CLK_TCK")
    groups = {pgid: (total / hertz, main / hertz) for pgid, (total, main) in ticks.items()}
    processes = {
        pgid: {pid: used / hertz for pid, used in pids.items()}
        for pgid, pids in per_process.items()
    }
    return CpuSnapshot(time.monotonic(), groups, machine_ticks(), processes)


def machine_ticks() -> tuple[int, int] | None:
    """(busy, all) ticks summed over every core: busy is all but idle and iowait."""
    try:
        values = [int(v) for v in (PROC / "stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, IndexError, ValueError):
        return None
    return sum(values) - values[3] - values[4], sum(values)


def window(before: CpuSnapshot, after: CpuSnapshot, pgids: Sequence[int]) -> CpuWindow:
    seconds = after.at - before.at
    group_s = [after.groups[g][0] - before.groups[g][0] for g in pgids]
    main_s = [after.groups[g][1] - before.groups[g][1] for g in pgids]
    busiest_s = [
        busiest(before.processes.get(g, {}), after.processes.get(g, {}), main)
        for g, main in zip(pgids, main_s, strict=True)
    ]
    machine = None
    if before.machine and after.machine and after.machine[1] > before.machine[1]:
        busy = after.machine[0] - before.machine[0]
        share = busy / (after.machine[1] - before.machine[1])
        machine = share * (os.cpu_count() or 1)
    return CpuWindow(seconds, group_s, main_s, machine, busiest_s)


def busiest(before: dict[int, float], after: dict[int, float], main_s: float) -> float:
    """CPU seconds of a group's busiest process over the window (one that started
    in it counts from zero); its main process's where no process was read."""
    if not after:
        return main_s
    return max(used - before.get(pid, 0.0) for pid, used in after.items())
