"""Alternation, medians, ratios, tables and exit status of the benchmark harness."""

from __future__ import annotations

import json

import pytest

from benchmarks.loadgen import WrkResult
from benchmarks.results import (
    RunRecord,
    alternate,
    exit_status,
    format_ratio,
    format_table,
    median_or_none,
    ratio,
    summarize,
)


def wrk(rate: float, p99_ms: float = 10.0, non2xx: int = 0) -> WrkResult:
    return WrkResult(
        requests=int(rate * 2), duration_s=2.0, requests_per_s=rate, p50_ms=p99_ms / 2,
        p90_ms=p99_ms, p99_ms=p99_ms, mean_ms=1.0, max_ms=p99_ms,
        non2xx=non2xx, socket_errors={"connect": 0, "read": 0, "write": 0, "timeout": 0},
    )  # fmt: skip


def run(
    label: str,
    round_index: int,
    rate: float,
    cpu: float | None = 100.0,
    p99_ms: float = 10.0,
    non2xx: int = 0,
) -> RunRecord:
    return RunRecord("c16", label, round_index, 1.0, wrk(rate, p99_ms, non2xx), cpu, cpu)


RECORDS = [
    run("inferd", 0, 1000, p99_ms=8),
    run("mlserver", 0, 250, cpu=400),
    run("mlserver", 1, 300, cpu=400, non2xx=2),
    run("inferd", 1, 900, p99_ms=12),
    run("inferd", 2, 1200, p99_ms=10),
    run("mlserver", 2, 200, cpu=400),
]


def test_rounds_alternate_the_order() -> None:
    names = ["a", "b", "c"]
    assert [alternate(names, i) for i in range(3)] == [names, names[::-1], names]


def test_median_or_none() -> None:
    assert median_or_none([3.0, 1.0, 2.0]) == 2.0
    assert median_or_none([1.0, 2.0]) == 1.5
    assert median_or_none([1.0, None]) is None
    assert median_or_none([]) is None


def test_summary_takes_medians_over_rounds_and_sums_errors() -> None:
    summary = summarize(RECORDS)
    assert list(summary) == ["c16"]
    inferd, mlserver = summary["c16"]["inferd"], summary["c16"]["mlserver"]
    assert list(summary["c16"]) == ["inferd", "mlserver"]  # in first-run order
    assert inferd["runs"] == 3 and inferd["requests_per_s"] == 1000
    assert inferd["p99_ms"] == 10 and inferd["errors"] == 0
    assert mlserver["requests_per_s"] == 250 and mlserver["errors"] == 2
    assert mlserver["cpu_us_per_request"] == 400


def test_a_run_without_cpu_figures_leaves_the_median_out() -> None:
    summary = summarize([run("inferd", 0, 100), run("inferd", 1, 100, cpu=None)])
    assert summary["c16"]["inferd"]["cpu_us_per_request"] is None


def test_ratios_of_medians_and_the_median_of_per_round_ratios() -> None:
    summary = summarize(RECORDS)["c16"]
    values = ratio(RECORDS, summary, "c16", "inferd", "mlserver")
    assert values is not None
    assert values["requests_per_s"] == 1000 / 250
    assert values["paired_requests_per_s"] == pytest.approx(4.0)  # 4.0, 3.0, 6.0
    assert values["p99_ms"] == 10 / 10
    assert values["cpu_us_per_request"] == 100 / 400
    assert ratio(RECORDS, summary, "c16", "inferd", "floor") is None
    line = format_ratio("inferd", "mlserver", values)
    assert line.startswith("inferd/mlserver: req/s x4.00 (per round x4.00)")
    assert "CPU/request x0.25" in line


def test_the_table_lists_each_contender_with_its_medians() -> None:
    lines = format_table(summarize(RECORDS)["c16"])
    assert lines[0].split() == [
        "contender", "runs", "req/s", "p50", "ms", "p99", "ms", "errors", "CPU", "us/req",
        "main", "us/req",
    ]  # fmt: skip
    assert lines[1].split() == ["inferd", "3", "1000.0", "5.00", "10.00", "0", "100", "100"]
    assert lines[2].split()[:2] == ["mlserver", "3"]


def test_records_serialize_to_json() -> None:
    as_json = json.loads(json.dumps([r.to_dict() for r in RECORDS]))
    assert as_json[2]["label"] == "mlserver" and as_json[2]["errors"] == 2
    assert as_json[0]["requests_per_s"] == 1000 and as_json[0]["round"] == 0


def test_exit_status_says_what_went_wrong() -> None:
    assert exit_status(RECORDS[:2], []) == 0
    assert exit_status(RECORDS, []) == 2  # non-2xx answers in a measured run
    assert exit_status(RECORDS, ["mlserver round 3: did not start"]) == 1
