"""How many CPUs this process may use: its affinity, capped by its cgroup's CPU quota.

``os.sched_getaffinity`` sees the node's cores: a Kubernetes pod limited to one CPU
on a 64-core node would start 64 workers, each getting a 64th of a core and all
throttled. The limit lives in the cgroup: ``cpu.max`` ("QUOTA PERIOD" or "max
PERIOD") in cgroup v2, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1: none)
in cgroup v1. A fractional quota rounds up: 1.5 CPUs gives 2 workers, which together
use the whole quota rather than leave half a core idle.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def available_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """The CPUs this process may use (at least 1)."""
    cores = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    if quota is None:
        return cores
    return max(1, min(cores, math.ceil(quota)))


def cgroup_cpu_limit(
    cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP
) -> float | None:
    """The cgroup's CPU quota in CPUs (1.5 = one and a half); None when unlimited or
    when no cgroup file can be read (not Linux, or no cgroup mounted)."""
    lines = _cgroup_lines(proc_cgroup)
    for folder in _v2_folders(cgroup_root, lines):
        limit = _read_v2(folder / "cpu.max")
        if not isinstance(limit, _Unreadable):
            return limit
    for folder in _v1_folders(cgroup_root, lines):
        limit = _read_v1(folder)
        if not isinstance(limit, _Unreadable):
            return limit
    return None


class _Unreadable:
    """No such file here: look elsewhere (unlike None, "no limit")."""


_UNREADABLE = _Unreadable()
Limit = float | None | _Unreadable


def _cgroup_lines(proc_cgroup: Path) -> list[tuple[str, str]]:
    """(controllers, path) of each line of /proc/self/cgroup ("ID:CONTROLLERS:PATH")."""
    try:
        text = proc_cgroup.read_text()
    except OSError:
        return []
    lines = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            lines.append((parts[1], parts[2].strip().lstrip("/")))
    return lines


def _v2_folders(cgroup_root: Path, lines: list[tuple[str, str]]) -> list[Path]:
    """This process's own cgroup folder (``0::/path``), then the root: inside a
    container's cgroup namespace the path is "/" and they are one."""
    own = [cgroup_root / path for controllers, path in lines if controllers == "" and path]
    return [*own, cgroup_root]


def _v1_folders(cgroup_root: Path, lines: list[tuple[str, str]]) -> list[Path]:
    """The cpu controller's folder of this process's cgroup, then the controller's root."""
    folders = []
    for controllers, path in lines:
        if "cpu" in controllers.split(","):
            folders += [cgroup_root / controllers / path, cgroup_root / controllers]
    return [*folders, cgroup_root / "cpu", cgroup_root / "cpu,cpuacct"]


def _read_v2(path: Path) -> Limit:
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return _UNREADABLE
    if quota == "max":
        return None
    return _ratio(quota, period)


def _read_v1(folder: Path) -> Limit:
    try:
        quota = (folder / "cpu.cfs_quota_us").read_text().strip()
        period = (folder / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return _UNREADABLE
    if quota.startswith("-"):
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> Limit:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return _UNREADABLE
    if quota_us <= 0 or period_us <= 0:
        return None
    return quota_us / period_us
