"""``python -m benchmarks scale``: its command line, load split, CPU windows and tables."""

from __future__ import annotations

import os

import pytest

from benchmarks.loadgen import WRK_MARKER, WrkResult
from benchmarks.scale.cpu import CpuSnapshot, snapshot, stat_fields, window
from benchmarks.scale.load import (
    Outcome,
    Share,
    checked_wrk_script,
    h2load_command,
    parse_checked_wrk,
    split_load,
)
from benchmarks.scale.options import (
    Layout,
    ScaleOptions,
    format_cpus,
    parse,
    parse_cpus,
    parse_replicas,
    parse_setting,
    plan_cores,
)
from benchmarks.scale.report import (
    WindowRecord,
    ceiling,
    markdown_table,
    summarize,
    window_record,
)

TWO_CORES = [0, 1]
SIXTEEN_CORES = list(range(16))


def options(*argv: str, cores: list[int] = TWO_CORES) -> ScaleOptions:
    return parse(list(argv), available=cores)


def labels(parsed: ScaleOptions) -> list[str]:
    return [layout.label for layout in parsed.layouts]


# ---------------------------------------------------------------- command line


def test_core_lists_parse_and_print_as_ranges() -> None:
    assert parse_cpus("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpus("5,1,1") == (1, 5)
    assert format_cpus((0, 1, 2, 3, 8, 10, 11)) == "0-3,8,10-11"
    for bad in ("", "a", "3-1", "-1", "0-"):
        with pytest.raises(ValueError, match="list of cores"):
            parse_cpus(bad)


def test_a_small_machine_shares_its_cores_and_says_so() -> None:
    plan = plan_cores(None, None, TWO_CORES)
    assert (plan.server, plan.load, plan.shared) == ((0, 1), (0, 1), True)
    assert plan.pin(plan.server) is None  # pinning to every core changes nothing
    assert "SHARE" in plan.describe()


def test_sixteen_cores_split_twelve_for_the_servers_four_for_the_load() -> None:
    plan = plan_cores(None, None, SIXTEEN_CORES)
    assert plan.server == tuple(range(12)) and plan.load == (12, 13, 14, 15)
    assert not plan.shared and plan.pin(plan.load) == (12, 13, 14, 15)
    assert plan.describe() == "servers pinned to cores 0-11, load generators to cores 12-15"


def test_cores_asked_for_win_and_one_side_takes_the_rest() -> None:
    assert plan_cores("0-1", None, list(range(4))).load == (2, 3)
    assert plan_cores(None, "3", list(range(4))).server == (0, 1, 2)
    assert plan_cores("0", "1", TWO_CORES).shared is False
    with pytest.raises(ValueError, match="not all available"):
        plan_cores("0-11", "12-15", TWO_CORES)


def test_defaults_on_two_cores_measure_one_server_against_two_replicas() -> None:
    parsed = options()
    assert labels(parsed) == ["1 x default", "1 x 0", "2 x 0"]
    assert [layout.replicas for layout in parsed.layouts] == [False, False, True]
    assert (parsed.duration, parsed.warmup, parsed.rounds) == (5, 1, 1)
    assert (parsed.connections, parsed.load_threads) == (16, 1)
    assert parsed.models == ("light", "heavy") and parsed.protocols == ("rest", "grpc")


def test_defaults_on_sixteen_cores_put_a_replica_on_each_server_core() -> None:
    parsed = options(cores=SIXTEEN_CORES)
    assert labels(parsed) == ["1 x default", "1 x 0", "12 x 0"]
    assert (parsed.connections, parsed.load_threads) == (48, 4)


def test_the_issue_27_layouts() -> None:
    argv = ["--server-cores", "0-11", "--load-cores", "12-15", "--workers", "default", "1",
            "4", "12", "--replicas", "4x0", "8", "12x0", "6x1"]  # fmt: skip
    parsed = options(*argv, cores=SIXTEEN_CORES)
    assert labels(parsed) == [
        "1 x default", "1 x 1", "1 x 4", "1 x 12", "4 x 0", "8 x 0", "12 x 0", "6 x 1",
    ]  # fmt: skip
    assert parsed.layouts[-1] == Layout(6, 1, {}, True)


def test_server_settings_go_to_the_one_server_layouts_only() -> None:
    parsed = options("--server-setting", "protocol_processes=4", "--server-setting",
                     "host=0.0.0.0", "--replica-setting", "debug=false")  # fmt: skip
    one, _, replicas = parsed.layouts
    assert one.settings == {"protocol_processes": 4, "host": "0.0.0.0"}
    assert one.label == '1 x default protocol_processes=4 host="0.0.0.0"'
    assert one.settings_json() == {"protocol_processes": 4, "host": "0.0.0.0"}
    assert replicas.settings_json() == {"parallel_workers": 0, "debug": False}


def test_one_server_per_protocol_processes_value_and_replicas_run_one_each() -> None:
    parsed = options("--workers", "0", "--protocol-processes", "default", "1", "4")
    assert labels(parsed) == [
        "1 x 0", "1 x 0 protocol_processes=1", "1 x 0 protocol_processes=4", "2 x 0",
    ]  # fmt: skip
    four, replicas = parsed.layouts[2:]
    assert four.settings_json() == {"parallel_workers": 0, "protocol_processes": 4}
    # told through the environment: replicas one process each, whatever the CPUs say
    assert [layout.protocol_processes for layout in parsed.layouts] == [None, None, None, 1]
    assert "protocol_processes" not in replicas.settings_json()
    mine = options("--replica-setting", "protocol_processes=2").layouts[-1]
    assert mine.protocol_processes is None and mine.settings_json()["protocol_processes"] == 2
    with pytest.raises(SystemExit):
        options("--protocol-processes", "0")


def test_settings_values_are_json_where_they_parse() -> None:
    assert parse_setting("protocol_processes=4") == ("protocol_processes", 4)
    assert parse_setting("x=[1, 2]") == ("x", [1, 2])
    assert parse_setting(" name = a=b") == ("name", " a=b")
    for bad in ("protocol_processes", "=4"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parse_setting(bad)


def test_replicas_are_k_or_k_x_p() -> None:
    assert parse_replicas("4") == (4, 0) and parse_replicas("6x1") == (6, 1)
    for bad in ("0", "x1", "4x-1", "4xa", "many"):
        with pytest.raises(ValueError, match="--replicas"):
            parse_replicas(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "two"],
        ["--workers", "-1"],
        ["--replicas", "0x0"],
        ["--workers", "--replicas"],  # nothing to measure
        ["--duration", "0"],
        ["--connections", "1"],  # fewer than the 2 replicas
        ["--models", "huge"],
        ["--protocols", "kafka"],
        ["--server-cores", "7"],
        ["--server-setting", "nothing"],
    ],
)
def test_bad_options_are_refused_with_a_message(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        options(*argv)
    assert stopped.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_a_layout_listed_twice_runs_once() -> None:
    assert labels(options("--workers", "0", "0", "--replicas", "2", "2x0")) == ["1 x 0", "2 x 0"]


# ------------------------------------------------------------------------ load


def test_the_load_is_split_evenly_over_the_servers() -> None:
    assert split_load(1, 16, 1) == Share(16, 1)
    assert split_load(2, 16, 1) == Share(8, 1)  # at least one thread per server
    assert split_load(1, 48, 4) == Share(48, 4)
    assert split_load(12, 48, 4) == Share(4, 1)
    assert split_load(3, 4, 9) == Share(2, 2)  # never more threads than connections


def test_wrk_checks_every_answer_against_the_checked_bytes() -> None:
    script = checked_wrk_script(b'{"inputs":[]}', b'{"outputs":[1]}')
    assert 'wrk.body = [==[{"inputs":[]}]==]' in script
    assert 'local expected = [==[{"outputs":[1]}]==]' in script
    assert "body ~= expected" in script and "wrong=%d" in script
    with pytest.raises(ValueError, match="]==]"):
        checked_wrk_script(b"]==]", b"{}")


def test_wrong_answers_count_as_errors() -> None:
    line = (
        f"{WRK_MARKER} requests=1000 duration_us=2000000 bytes=9 non2xx=2 connect=0 read=1 "
        "write=0 timeout=0 p50_us=1000 p90_us=2000 p99_us=5000 mean_us=1100.0 max_us=9000 wrong=7"
    )
    outcome = parse_checked_wrk(f"Running 2s test\n{line}\n")
    assert outcome.wrong == 7 and outcome.result.requests_per_s == 500.0
    assert outcome.errors == 2 + 1 + 7
    with pytest.raises(RuntimeError, match="wrong="):
        parse_checked_wrk(line.replace(" wrong=7", ""))


def test_h2load_runs_for_the_window() -> None:
    from pathlib import Path

    command = h2load_command("h2load", "http://h/p", Path("b"), Path("l"), Share(8, 2), 5)
    assert command[:5] == ["h2load", "-D5", "-c8", "-m1", "-t2"]
    assert command[-2:] == ["--log-file=l", "http://h/p"]


# ------------------------------------------------------------------------- CPU


def test_proc_stat_fields_survive_spaces_in_the_command_name() -> None:
    stat = "4242 (python -m x) S 1 4200 4200 0 -1 0 0 0 0 0 150 50 0 0 20 0 3 0 1 2 3"
    assert stat_fields(stat) == (4200, 200, 4242)


def test_a_window_gives_cores_busy_and_the_busiest_main_process() -> None:
    before = CpuSnapshot(10.0, {1: (5.0, 4.0), 2: (1.0, 1.0)}, (100, 400))
    after = CpuSnapshot(12.0, {1: (8.0, 5.5), 2: (2.8, 2.8)}, (500, 800))
    cpu = window(before, after, [1, 2])
    assert cpu.group_s == [3.0, pytest.approx(1.8)] and cpu.main_s == [1.5, pytest.approx(1.8)]
    assert cpu.cores_busy == pytest.approx(2.4)
    assert cpu.busiest_main_share == pytest.approx(0.9)
    assert cpu.machine_cores_busy is not None


def test_the_busiest_process_is_a_protocol_process_when_the_main_one_supervises() -> None:
    # group 1: a supervisor (pid 1) and two protocol processes, one started in the window
    before = CpuSnapshot(10.0, {1: (5.0, 1.0)}, None, {1: {1: 1.0, 7: 4.0}})
    after = CpuSnapshot(12.0, {1: (8.6, 1.1)}, None, {1: {1: 1.1, 7: 5.8, 9: 1.7}})
    cpu = window(before, after, [1])
    assert cpu.busiest_s == [pytest.approx(1.8)] and cpu.main_s == [pytest.approx(0.1)]
    assert cpu.busiest_share == pytest.approx(0.9) and cpu.busiest_main_share < 0.1


def test_a_snapshot_reads_every_process_of_a_group() -> None:
    group = os.getpgid(0)
    taken = snapshot([group])
    assert os.getpid() in taken.processes[group]
    assert taken.groups[group][0] >= max(taken.processes[group].values())


# ---------------------------------------------------------------------- tables


def wrk(rate: float, p99_ms: float, non2xx: int = 0) -> WrkResult:
    return WrkResult(
        requests=int(rate * 5), duration_s=5.0, requests_per_s=rate, p50_ms=p99_ms / 3,
        p90_ms=p99_ms / 2, p99_ms=p99_ms, mean_ms=1.0, max_ms=p99_ms, non2xx=non2xx,
        socket_errors={"connect": 0, "read": 0, "write": 0, "timeout": 0},
    )  # fmt: skip


def record(
    layout: Layout, rates: list[float], p99s: list[float], round_index: int = 0
) -> WindowRecord:
    before = CpuSnapshot(0.0, {i: (0.0, 0.0) for i in range(len(rates))}, None)
    after = CpuSnapshot(5.0, {i: (5.0, 4.0 + i) for i in range(len(rates))}, None)
    cpu = window(before, after, list(range(len(rates))))
    outcomes = [Outcome(wrk(r, p), wrong=0) for r, p in zip(rates, p99s, strict=True)]
    return window_record(round_index, layout, "light", "rest", outcomes, cpu)


ONE = Layout(1, None, {}, False)
FOUR = Layout(4, 0, {}, True)
TWELVE = Layout(12, 0, {}, True)


def test_a_layout_adds_its_servers_and_keeps_the_worst_p99() -> None:
    four = record(FOUR, [2500.0, 2600.0, 2700.0, 2800.0], [7.0, 5.0, 6.0, 9.0])
    assert four.requests_per_s == 10600.0 and four.p99_ms == 9.0 and four.servers == 4
    assert four.cores_busy == pytest.approx(4.0)  # 4 servers, each 5 s of CPU in 5 s
    assert four.main_share == pytest.approx(7.0 / 5)  # the busiest main process (4 + 3)
    assert [s["requests_per_s"] for s in four.per_server] == [2500.0, 2600.0, 2700.0, 2800.0]


def test_the_table_gives_each_layout_its_share_of_the_ceiling() -> None:
    records = [
        record(ONE, [4127.0], [14.0]),
        record(FOUR, [2740.0] * 4, [7.0] * 4),
        record(TWELVE, [2251.0] * 12, [3.0] * 12),
    ]
    ((key, rows),) = summarize(records).items()
    assert key == ("light", "rest") and ceiling(rows) == pytest.approx(27012.0)
    table = markdown_table(rows)
    assert table[0].startswith("| servers x parallel_workers | req/s | of the ceiling | p99 ms")
    # CPU us/req: each server 5 CPU s over its 5 s of requests (requests = 5 x rate)
    assert table[2] == "| 1 x default | 4,127 | 0.15 | 14.0 | 1.0 | 80% | 242 | 0 |"
    assert table[3] == "| 4 x 0 (replicas) | 10,960 | 0.41 | 7.0 | 4.0 | 140% | 365 | 0 |"
    assert table[4] == "| 12 x 0 (replicas) | **27,012** | 1.00 | 3.0 | 12.0 | 300% | 444 | 0 |"


def test_rounds_are_summarized_by_their_medians_and_errors_add_up() -> None:
    first = record(ONE, [1000.0], [10.0], round_index=0)
    second = record(ONE, [3000.0], [30.0], round_index=1)
    third = record(ONE, [2000.0], [20.0], round_index=2)
    broken = WindowRecord(**{**third.to_dict(), "round": 3, "errors": 5})
    (rows,) = summarize([first, second, third, broken]).values()
    (row,) = rows
    assert (row.rounds, row.requests_per_s, row.p99_ms, row.errors) == (4, 2000.0, 20.0, 5)
    assert ceiling(rows) is None
    assert markdown_table(rows)[2].split(" | ")[2] == "-"  # no replicas: no share


def test_layout_folders_are_plain_names() -> None:
    from benchmarks.scale.run import folder_name

    assert folder_name('1 x default host="0.0.0.0" x=[1, 2]') == "1xdefaulthost=_0.0.0.0_x=_1_2_"
    assert folder_name("12 x 0") == "12x0"


def test_the_report_names_each_table_and_says_when_nothing_ran() -> None:
    from benchmarks.scale.report import markdown

    lines = markdown(summarize([record(ONE, [500.0], [9.0])]), {"light": "light: iris"}, 2)
    assert lines[1] == "light: iris, REST:" and lines[-1].endswith("Medians over 2 rounds.")
    assert markdown({}, {}, 1) == ["", "No window was measured."]
