"""The soak's pure parts: growth and its bounds, the answers' checks, the HTTP reading."""

from __future__ import annotations

import argparse

import orjson
import pytest

from benchmarks.soak import RSS_FLOOR_KIB, Sample, judge, parse, slope_per
from benchmarks.soakclient import rest_outputs
from benchmarks.soakmix import ANSWER, ERROR, LEAVE, STREAM, Kind, Mix, build_kinds
from benchmarks.sse import sse_events
from tests.support.procstat import Usage


@pytest.fixture(scope="module")
def kinds() -> dict[str, Kind]:
    return {kind.name: kind for kind in build_kinds()}


def test_the_slope_is_the_growth_per_100k_requests() -> None:
    assert slope_per([(0, 10.0), (50_000, 15.0), (100_000, 20.0)]) == pytest.approx(10.0)
    assert slope_per([(0, 7.0), (10_000, 7.0)]) == 0.0
    assert slope_per([(0, 7.0)]) == 0.0


def run_of(rss: list[int], fds: list[int] | None = None) -> list[Sample]:
    """Samples every 10k requests of one server whose RSS (KiB) and fds are given."""
    fds = fds or [30] * len(rss)
    return [
        Sample(i * 10_000, float(i), {"server": Usage(rss_kib=r, fds=f, threads=8)})
        for i, (r, f) in enumerate(zip(rss, fds, strict=True))
    ]


def args_of(requests: int) -> argparse.Namespace:
    return parse(["--requests", str(requests)])


def test_a_flat_run_passes_after_its_warm_up() -> None:
    # The first tenth (the warm-up) may grow: caches, arenas, lazy imports.
    samples = run_of([50_000, 90_000] + [90_000 + (i % 2) * 300 for i in range(19)])
    verdict = judge(args_of(200_000), samples, problems=0)
    assert verdict["ok"], verdict["failures"]
    assert verdict["warm_up_requests"] == 20_000 and verdict["measured_requests"] == 180_000
    assert abs(verdict["processes"]["server"]["rss_kib_per_100k"]) < 200


def test_a_leak_of_a_hundred_bytes_per_request_fails() -> None:
    samples = run_of([90_000 + i * 1_000 for i in range(21)])  # 10 MiB per 100k
    verdict = judge(args_of(200_000), samples, problems=0)
    assert not verdict["ok"]
    assert "server: RSS grew 10000 KiB per 100k (bound 2276)" in verdict["failures"][0]


def test_a_short_run_is_bounded_by_the_floor_over_its_span() -> None:
    samples = run_of([90_000, 90_000, 90_500, 91_000])  # +1 MiB over 20k requests
    verdict = judge(args_of(30_000), samples, problems=0)
    assert verdict["ok"], verdict["failures"]
    assert verdict["rss_bound_kib_per_100k"] == pytest.approx(RSS_FLOOR_KIB * 100_000 / 20_000)


def test_file_descriptors_left_behind_and_wrong_answers_fail() -> None:
    samples = run_of([90_000] * 5, fds=[30, 30, 31, 33, 34])
    verdict = judge(args_of(40_000), samples, problems=3)
    assert verdict["failures"] == ["3 wrong answer(s)", "server: file descriptors 30 -> 34"]


def test_the_mix_covers_every_expectation_and_is_reproducible(kinds: dict[str, Kind]) -> None:
    assert {kind.expect for kind in kinds.values()} == {ANSWER, ERROR, LEAVE, STREAM}
    first, second = Mix(build_kinds(), seed=3), Mix(build_kinds(), seed=3)
    assert [k.name for k in first.pick(50)] == [k.name for k in second.pick(50)]


def test_answers_are_checked_exactly(kinds: dict[str, Kind]) -> None:
    echo = kinds["echo-4-floats"]
    assert echo.check_rest(200, [[0.0, 0.5, 1.0, 1.5]], "") == ""
    assert "wrong outputs" in echo.check_rest(200, [[0.0, 0.5, 1.0, 2.0]], "")
    assert "failed with 503" in echo.check_rest(503, None, "busy")
    fails = kinds["echo-fails"]
    assert fails.check_grpc("INTERNAL", None, "the soak asked this request to fail") == ""
    assert "wanted 500" in fails.check_rest(200, [[1.0]], "")


def test_events_are_read() -> None:
    # The HTTP/1.1 answers (heads, chunks) are the tools' client's: test_leanhttp.py.
    body = b'data: {"outputs": [{"data": [1]}]}\n\nevent: error\ndata: {"error": "x"}\n\n'
    events = [(kind, orjson.loads(data)) for kind, data in sse_events(body)]
    assert events == [("message", {"outputs": [{"data": [1]}]}), ("error", {"error": "x"})]
    assert rest_outputs(events[0][1]) == [[1]] and rest_outputs(events[1][1]) is None
