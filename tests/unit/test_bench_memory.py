"""``python -m benchmarks memory``: the process tree and its PSS, the growth per worker,
the table, the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.memory.measure import RunRecord
from benchmarks.memory.model import answered_classes
from benchmarks.memory.options import (
    INFERD_FORK_LABEL,
    INFERD_RUNTIME_LABEL,
    parse,
    servers_of,
)
from benchmarks.memory.pss import (
    ProcessMemory,
    TreeMemory,
    parent_map,
    parse_rollup,
    process_memory,
    process_tree,
    session_members,
    tree_memory,
)
from benchmarks.memory.report import LEGEND, markdown, markdown_table, summarize
from benchmarks.servers import INFERD, MLSERVER
from tests.support.polling import wait_for

ROLLUP = """\
55f5c9179000-7ffe74097000 ---p 00000000 00:00 0                          [rollup]
Rss:                1732 kB
Pss:                 410 kB
Shared_Clean:       1572 kB
Private_Clean:        48 kB
Private_Dirty:       112 kB
SwapPss:               4 kB
"""


def fake_process(proc: Path, pid: int, parent: int, pss_kib: int, session: int) -> None:
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    (folder / "stat").write_text(f"{pid} (python -m x) S {parent} {pid} {session} 0 -1\n")
    (folder / "cmdline").write_bytes(b"python\0-m\0x\0")
    (folder / "smaps_rollup").write_text(ROLLUP.replace("410", str(pss_kib)))


def test_smaps_rollup_lines_are_read_in_kib() -> None:
    fields = parse_rollup(ROLLUP)
    assert (fields["Rss"], fields["Pss"], fields["Private_Dirty"], fields["SwapPss"]) == (
        1732, 410, 112, 4,
    )  # fmt: skip
    assert "55f5c9179000-7ffe74097000 ---p 00000000 00" not in fields


def test_a_tree_sums_every_descendant_and_its_session_and_nothing_else(tmp_path: Path) -> None:
    """A server leading its session, its worker, the worker's child, a process of its
    session whose parent went (double-forked); another session's process left out."""
    processes = ((10, 1, 1000, 10), (11, 10, 2000, 10), (12, 11, 3000, 10), (13, 1, 500, 10))
    for pid, parent, pss, session in (*processes, (20, 1, 9999, 20)):
        fake_process(tmp_path, pid, parent, pss, session)
    (tmp_path / "self" / "task" / "1").mkdir(parents=True)  # no children files: by parent
    tree = tree_memory(10, tmp_path)
    assert [p.pid for p in tree.processes] == [10, 11, 12, 13]
    assert tree.detached == (13,)
    assert tree.pss_mib == pytest.approx((1000 + 2000 + 3000 + 500 + 4 * 4) / 1024)
    assert tree.uss_mib == pytest.approx(4 * 160 / 1024)
    assert tree.processes[0].command == "python -m x"


def test_a_process_leading_no_session_gets_its_tree_alone(tmp_path: Path) -> None:
    for pid, parent, session in ((10, 1, 5), (11, 10, 5), (12, 1, 5)):
        fake_process(tmp_path, pid, parent, 100, session)
    assert session_members(10, tmp_path) == []
    assert [p.pid for p in tree_memory(10, tmp_path).processes] == [10, 11]


def test_a_process_gone_or_a_zombie_counts_nothing(tmp_path: Path) -> None:
    fake_process(tmp_path, 30, 1, 500, 30)
    (tmp_path / "30" / "smaps_rollup").write_text("")  # a zombie's rollup is empty
    assert process_memory(30, tmp_path) is None
    assert process_memory(31, tmp_path) is None


def test_the_tree_walk_visits_each_process_once() -> None:
    links = {1: [2, 3], 2: [4], 3: [4], 4: []}
    assert process_tree(1, lambda pid: links.get(pid, [])) == [1, 2, 3, 4]


def test_this_process_s_child_is_in_its_tree() -> None:
    """On the real /proc: a child started here is found, and has memory of its own."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        wait_for(lambda: child.pid in parent_map().get(os.getpid(), []), "the child listed")
        tree = tree_memory(os.getpid())
        assert [p.pid for p in tree.processes][:1] == [os.getpid()]
        assert child.pid in {p.pid for p in tree.processes}
        assert tree.pss_mib > 1 and tree.rss_mib >= tree.pss_mib
    finally:
        child.kill()
        child.wait()


def memory(*pss_mib: float) -> TreeMemory:
    return TreeMemory(
        tuple(
            ProcessMemory(i, "python", 0, int(m * 1024), int(m * 512), 0)
            for i, m in enumerate(pss_mib)
        )
    )


def record(server: str, workers: int, pss_mib: float, ready_s: float, rnd: int = 0) -> RunRecord:
    served = memory(*([pss_mib / (workers + 1)] * (workers + 1)))
    return RunRecord(rnd, server, workers, ready_s, 8, 1.0, served, served)


def test_growth_per_added_worker_and_ready_ratio_are_over_the_fewest_workers() -> None:
    records = [
        record(INFERD, 1, 270, 1.6),
        record(INFERD, 4, 758, 4.5),
        record(INFERD, 4, 770, 4.7, rnd=1),
        record(MLSERVER, 0, 150, 2.0),
        record(MLSERVER, 2, 500, 2.2),
        record(MLSERVER, 1, 340, 2.1),
    ]
    summary = summarize(records)
    assert list(summary) == [INFERD, MLSERVER]
    one, four = summary[INFERD]
    assert (one.per_added_worker_mib, one.ready_ratio) == (None, 1.0)
    assert four.rounds == 2 and four.pss_mib == pytest.approx(764, abs=0.01)
    assert four.per_added_worker_mib == pytest.approx((764 - 270) / 3, abs=0.01)
    assert four.ready_ratio == pytest.approx(4.6 / 1.6)
    zero, _, two = summary[MLSERVER]  # 0 serves in process: the growth starts at 1
    assert (zero.per_added_worker_mib, zero.ready_ratio) == (None, None)
    assert two.per_added_worker_mib == pytest.approx(160, abs=0.01)


def test_the_table_puts_the_servers_side_by_side() -> None:
    records = [record(INFERD, 1, 270, 1.6), record(INFERD, 4, 758, 4.5)]
    records += [record(MLSERVER, 1, 300, 3.5)]
    lines = markdown_table(summarize(records))
    assert lines[0].startswith("| parallel_workers | inferd PSS MiB (procs) | inferd +MiB/worker")
    assert "| mlserver PSS MiB (procs) |" in lines[0]
    assert lines[2] == "| 1 | 270 (2) | - | 1.6 (x1.0) | 300 (2) | - | 3.5 (x1.0) |"
    assert lines[3] == "| 4 | 758 (5) | +163 | 4.5 (x2.8) | - | - | - |"


def test_the_report_gives_the_private_memory_beside_the_table() -> None:
    records = [record(INFERD, 1, 200, 1.0), record(INFERD, 2, 400, 1.0)]
    lines = markdown(summarize(records), "a forest", rounds=3)
    assert lines[:2] == ["", "a forest:"]
    assert lines[-3].endswith("Medians over 3 rounds.")
    assert lines[-1] == "USS (private pages only) by parallel_workers, MiB: inferd 100 / 200."
    assert markdown({}, "a forest", rounds=1)[-3:] == ["No run was measured.", "", LEGEND]


def test_answers_are_read_from_the_first_output() -> None:
    assert answered_classes(b'{"outputs": [{"name": "predict", "data": [1]}]}') == [1]
    assert answered_classes(b'{"error": "Model forest not found"}') is None
    assert answered_classes(b"not json") is None


def test_the_command_line_defaults_and_servers() -> None:
    options = parse(["--only", "inferd"])
    assert options.workers == (1, 2, 4) and options.rounds == 1
    assert [s.label for s in options.servers] == [INFERD]
    assert (options.trees, options.rows) == (60, 40_000)
    servers = servers_of((INFERD, MLSERVER), inferd_runtime=True)
    assert [s.label for s in servers] == [INFERD, INFERD_RUNTIME_LABEL, MLSERVER]
    assert servers[0].implementation == servers[2].implementation  # the same folder
    assert servers[1].implementation == "inferd.runtimes.sklearn.SKLearnModel"


@pytest.mark.parametrize(
    "argv",
    [["--workers", "-1"], ["--rounds", "0"], ["--requests", "0"], ["--only", "mlserver"]],
)
def test_the_command_line_refuses_what_cannot_run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERD_BENCH_MLSERVER_PYTHON", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        parse(["--mlserver-python", "", *argv] if argv[0] == "--only" else argv)
    assert exit_info.value.code == 2


def test_fork_workers_adds_inferd_with_the_setting_on_beside_inferd() -> None:
    servers = servers_of((INFERD, MLSERVER), inferd_runtime=False, fork_workers=True)
    assert [(s.label, s.fork_workers) for s in servers] == [
        (INFERD, False),
        (INFERD_FORK_LABEL, True),
        (MLSERVER, False),
    ]
    assert parse(["--only", "inferd", "--fork-workers"]).servers[1].fork_workers


def test_loads_add_inferd_loading_the_model_after_its_start_beside_the_load_at_start() -> None:
    servers = servers_of((INFERD, MLSERVER), False, protocol_axis=True, loads=["start", "api"])
    assert [(s.label, s.load) for s in servers] == [
        (INFERD, "start"),
        ("inferd-spawn", "start"),
        ("inferd-api", "api"),
        (MLSERVER, "start"),
    ]
    later = servers_of((INFERD,), False, protocol_axis=True, loads=["poll", "request"])
    assert [s.label for s in later] == ["inferd-poll", "inferd-request"]
    options = parse(["--only", "inferd", "--protocol-processes", "--loads", "start", "request"])
    assert [s.label for s in options.servers] == [INFERD, "inferd-spawn", "inferd-request"]
