"""What /proc says about a process: its children, whether it runs, its resources.

Used by the e2e tests (workers that must not outlive the server) and by the soak
benchmark (memory, file descriptors and threads of the server and its workers).
Standard library only, like serverproc.py. Linux only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Usage:
    """One process's resident memory (KiB), open file descriptors and threads."""

    rss_kib: int
    fds: int
    threads: int


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (in parentheses) may hold spaces: split after its ")".
    state, parent = stat.rsplit(")", 1)[1].split()[:2]
    return state, int(parent)


def is_running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    found = _state_and_parent(pid)
    return found is not None and found[0] != "Z"


def children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    found = set()
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _state_and_parent(int(entry.name))
            if stat is not None and stat[1] == pid and stat[0] != "Z":
                found.add(int(entry.name))
    return found


def usage(pid: int) -> Usage | None:
    """``pid``'s VmRSS, fd count and Threads now; None if it has gone."""
    try:
        status = (PROC / str(pid) / "status").read_text()
        fds = sum(1 for _ in (PROC / str(pid) / "fd").iterdir())
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss = int(fields["VmRSS"].split()[0])  # "123456 kB"
    return Usage(rss_kib=rss, fds=fds, threads=int(fields["Threads"]))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used (/proc/PID/stat fields 14 and 15)."""
    fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def environment(pid: int) -> dict[str, str]:
    """The environment ``pid`` was started with."""
    raw = (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def descendants(pid: int) -> set[int]:
    """Live processes below ``pid``: its children, theirs, and so on."""
    found = children(pid)
    for child in list(found):
        found |= descendants(child)
    return found


def pss_kib(pid: int) -> int:
    """``pid``'s proportional set size in KiB (each shared page split among its sharers);
    0 if it has gone."""
    try:
        rollup = (PROC / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return 0
    for line in rollup.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def tree_pss_mib(pid: int) -> float:
    """The PSS of ``pid`` and every process below it, in MiB: what the tree costs."""
    return sum(pss_kib(each) for each in {pid, *descendants(pid)}) / 1024


FORK_PARENT_MODULE = b"inferd.workers.forkserver"  # how a fork parent is started
SUPERVISED_MODULE = b"inferd.supervisor.child"  # a protocol process or the model host


def _started_as(pid: int, module: bytes) -> bool:
    try:
        return module in (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


FORKED_WORKER_NAME = "inferd-worker"  # a forked worker's comm (its cmdline is its parent's)
FORKED_PROTOCOL_PREFIX = "inferd-proto-"  # a forked protocol process's comm, then its index
FORKED_HOST_NAME = "inferd-host"  # the model host's comm when forked by the protocol fork parent


def _name(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def is_fork_parent(pid: int) -> bool:
    """Whether ``pid`` is a model's fork parent (``fork_workers``), not a worker forked
    from one (which the server adopted: its command line is the parent's)."""
    return _started_as(pid, FORK_PARENT_MODULE) and _name(pid) != FORKED_WORKER_NAME


def is_forked_worker(pid: int) -> bool:
    """Whether ``pid`` is a worker forked from a model's fork parent."""
    return _name(pid) == FORKED_WORKER_NAME


def is_supervised(pid: int) -> bool:
    """Whether ``pid`` is a protocol process or the model host a supervisor started
    (spawned: its module; or forked by the protocol fork parent: its name)."""
    name = _name(pid)
    forked = name.startswith(FORKED_PROTOCOL_PREFIX) or name == FORKED_HOST_NAME
    return forked or _started_as(pid, SUPERVISED_MODULE)


def is_model_host(pid: int) -> bool:
    """Whether ``pid`` is a supervisor's model host: forked (its name; its
    /proc/PID/environ is its parent's), or spawned (its environment names its role)."""
    if _name(pid) == FORKED_HOST_NAME:
        return True
    try:
        return environment(pid).get("INFERD_ROLE") == "model-host"
    except OSError:
        return False


def workers(server_pid: int) -> set[int]:
    """The server's live worker processes, spawned or forked (``fork_workers``: the
    server adopts them), in either layout: the children of the server (or, under a
    supervisor, of its processes: the model host's) that are not fork parents."""
    found = set()
    for child in children(server_pid):
        if is_protocol_parent(child) or is_fork_parent(child):
            continue
        if is_supervised(child):
            found |= workers(child)
        else:
            found.add(child)
    return found


PROTOCOL_PARENT_MODULE = b"inferd.supervisor.protocol_parent"  # the protocol fork parent
# Its name when forked from the supervisor (its command line is the supervisor's).
PROTOCOL_PARENT_NAME = "inferd-protopar"


def is_protocol_parent(pid: int) -> bool:
    """Whether ``pid`` is a supervisor's protocol fork parent (``fork_protocol_processes``):
    forked from the supervisor (named so), or started afresh (its module, which the
    protocol processes it forks show too: they are named)."""
    name = _name(pid)
    if name == PROTOCOL_PARENT_NAME:
        return True
    forked = name.startswith(FORKED_PROTOCOL_PREFIX) or name == FORKED_HOST_NAME
    return not forked and _started_as(pid, PROTOCOL_PARENT_MODULE)


def protocol_parent(supervisor_pid: int) -> int | None:
    """The supervisor's protocol fork parent, if one runs."""
    return next((pid for pid in children(supervisor_pid) if is_protocol_parent(pid)), None)


def forked_protocol_processes(supervisor_pid: int) -> set[int]:
    """The protocol processes forked by the protocol fork parent (the supervisor adopts
    them: they are its children, not the parent's)."""
    return {
        pid for pid in children(supervisor_pid) if _name(pid).startswith(FORKED_PROTOCOL_PREFIX)
    }


def served_by(supervisor_pid: int) -> set[int]:
    """A supervisor's protocol processes and its model host, spawned or forked: its
    children (none for a lone server, whose children are workers)."""
    return {pid for pid in children(supervisor_pid) if is_supervised(pid)}


def serving_processes(server_pid: int) -> set[int]:
    """The processes that run a server's in-process models: the server itself when it
    is a lone server, else its protocol processes (not the model host)."""
    protocol = set()
    for pid in served_by(server_pid):
        if not (PROC / str(pid) / "environ").exists():
            continue  # it exited since it was listed (a killed one, not reaped yet)
        if not is_model_host(pid):
            protocol.add(pid)
    return protocol or {server_pid}


def unix_socket_paths(pid: int) -> set[str]:
    """The paths of the Unix sockets ``pid`` holds open that are bound to one (its
    listening sockets among them): its fds' socket inodes, named in /proc/net/unix."""
    inodes = set()
    try:
        fds = list((PROC / str(pid) / "fd").iterdir())
    except OSError:
        return set()
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    paths = set()
    for line in (PROC / "net" / "unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes:
            paths.add(fields[7])
    return paths
