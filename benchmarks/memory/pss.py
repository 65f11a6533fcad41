"""The memory of a server's whole process tree, from /proc.

PSS (proportional set size) charges each page to the processes that map it in
equal shares, so the sum over a tree counts a page shared by every worker once:
the figure that shows what copy-on-write workers save, where RSS would count a
shared page once per process. The tree is the server and its children,
recursively; children come from ``/proc/<pid>/task/*/children`` where the kernel
has it (CONFIG_PROC_CHILDREN), else from the parent pid of every process. A
server that leads its own session (the benchmarks start every server so) also
gets the processes of its session outside the tree: a worker that was
double-forked, whose parent is no longer the server's, still counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")
KIB_PER_MIB = 1024
COMMAND_CHARS = 160
# smaps_rollup's lines, in kB: what a tree's figures are summed from.
ROLLUP_FIELDS = ("Rss", "Pss", "Private_Clean", "Private_Dirty", "SwapPss")

Children = Callable[[int], list[int]]


@dataclass(frozen=True)
class ProcessMemory:
    """One process's memory, in KiB (USS: its private pages, which only it holds)."""

    pid: int
    command: str  # its command line, cut short
    rss_kib: int
    pss_kib: int
    uss_kib: int
    swap_pss_kib: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TreeMemory:
    """Every live process of a tree, the root first."""

    processes: tuple[ProcessMemory, ...]
    detached: tuple[int, ...] = ()  # of those, the session's processes outside the tree

    @property
    def pss_mib(self) -> float:
        return sum(p.pss_kib + p.swap_pss_kib for p in self.processes) / KIB_PER_MIB

    @property
    def rss_mib(self) -> float:
        return sum(p.rss_kib for p in self.processes) / KIB_PER_MIB

    @property
    def uss_mib(self) -> float:
        return sum(p.uss_kib for p in self.processes) / KIB_PER_MIB

    def to_dict(self) -> dict[str, Any]:
        return {
            "pss_mib": round(self.pss_mib, 1),
            "rss_mib": round(self.rss_mib, 1),
            "uss_mib": round(self.uss_mib, 1),
            "processes": [p.to_dict() for p in self.processes],
            "detached": list(self.detached),
        }


def parse_rollup(text: str) -> dict[str, int]:
    """smaps_rollup's ``Name:   1234 kB`` lines as {name: KiB} (the header line skipped)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        words = rest.split()
        if colon and len(words) == 2 and words[1] == "kB" and words[0].isdigit():
            fields[name] = int(words[0])
    return fields


def process_memory(pid: int, proc: Path = PROC) -> ProcessMemory | None:
    """``pid``'s memory; None when it has ended (or is a zombie, with no memory left)."""
    try:
        rollup = parse_rollup((proc / str(pid) / "smaps_rollup").read_text())
        command = (proc / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    if "Pss" not in rollup:
        return None
    return ProcessMemory(
        pid=pid,
        command=command.replace(b"\0", b" ").decode(errors="replace").strip()[:COMMAND_CHARS],
        rss_kib=rollup.get("Rss", 0),
        pss_kib=rollup["Pss"],
        uss_kib=rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0),
        swap_pss_kib=rollup.get("SwapPss", 0),
    )


def tree_memory(root: int, proc: Path = PROC) -> TreeMemory:
    """The memory of ``root`` and all its descendants alive now, and of the rest of its
    session when it leads one."""
    tree = process_tree(root, children_reader(proc))
    detached = [pid for pid in session_members(root, proc) if pid not in tree]
    found = (process_memory(pid, proc) for pid in tree + detached)
    alive = tuple(memory for memory in found if memory is not None)
    return TreeMemory(alive, tuple(p.pid for p in alive if p.pid in detached))


def process_tree(root: int, children: Children) -> list[int]:
    """``root`` and its descendants, breadth first, each once."""
    tree, index = [root], 0
    while index < len(tree):
        tree.extend(child for child in children(tree[index]) if child not in tree)
        index += 1
    return tree


def children_reader(proc: Path = PROC) -> Children:
    """How to list a process's children on this kernel, read as of now."""
    if any((proc / "self" / "task").glob("*/children")):
        return lambda pid: kernel_children(pid, proc)
    by_parent = parent_map(proc)
    return lambda pid: by_parent.get(pid, [])


def kernel_children(pid: int, proc: Path = PROC) -> list[int]:
    """The children of every thread of ``pid`` (a thread's child is listed under it)."""
    found: list[int] = []
    for path in (proc / str(pid) / "task").glob("*/children"):
        try:
            found += [int(word) for word in path.read_text().split()]
        except FileNotFoundError:
            continue  # the thread ended meanwhile
    return found


def parent_map(proc: Path = PROC) -> dict[int, list[int]]:
    """{parent pid: its children's pids} over every process in ``proc``."""
    by_parent: dict[int, list[int]] = {}
    for pid, parent, _ in _stat_links(proc.iterdir()):
        by_parent.setdefault(parent, []).append(pid)
    return by_parent


def session_members(leader: int, proc: Path = PROC) -> list[int]:
    """The processes of the session ``leader`` leads; none when it leads no session (the
    session it is in would hold other programs, this one's included)."""
    links = list(_stat_links(proc.iterdir()))
    if (leader, leader) not in {(pid, session) for pid, _, session in links}:
        return []
    return [pid for pid, _, session in links if session == leader]


def _stat_links(entries: Iterable[Path]) -> Iterable[tuple[int, int, int]]:
    """(pid, parent pid, session id) of each process among ``entries``."""
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended meanwhile
        fields = stat.rsplit(")", 1)[1].split()  # past the name, which may hold spaces
        yield int(entry.name), int(fields[1]), int(fields[3])
