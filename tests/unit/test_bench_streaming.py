"""The streaming scenario: its options, contenders, cases, requests, model and report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest.mock import MagicMock

import numpy as np
import pytest

from benchmarks.grpc_floor_server import MODEL_STREAM_INFER, count_answers, one_method
from benchmarks.loadgen import LoadResult
from benchmarks.options import MLSERVER_PYTHON_ENV, parse_options
from benchmarks.repository import COUNT_MODULE, write_count_model
from benchmarks.results import RunRecord, format_ratio, format_run, format_table, unit_of
from benchmarks.scenarios import SCENARIOS, Scenario
from benchmarks.scenarios.streaming import grpc_request, json_request
from benchmarks.streamload import StreamLoad, combine
from benchmarks.streamwire import grpc_reader
from inferd.protocol import pb
from inferd.settings.loader import model_settings_from_dict
from inferd.types import InferenceRequest, Tensor
from inferd.workers.base import Call
from inferd.workers.inprocess import InProcessPool


@pytest.fixture(autouse=True)
def mlserver_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MLSERVER_PYTHON_ENV, sys.executable)


def scenario(*argv: str) -> Scenario:
    options = parse_options(list(SCENARIOS.values()), ["streaming", *argv])
    return SCENARIOS[options.scenario](options)


def test_inferd_at_each_worker_count_against_mlserver_in_process() -> None:
    bench = scenario()
    cases = bench.cases()
    assert [case.name for case in cases] == ["grpc c16", "sse c16"]
    assert cases[0].load == StreamLoad(16, 2)
    names = [c.label for c in cases[0].contenders]
    assert names == ["inferd pw=0", "inferd pw=1", "mlserver pw=0"]
    assert [c.settings for c in cases[0].contenders] == [{"parallel_workers": n} for n in (0, 1, 0)]
    assert bench.comparisons(names) == [
        ("inferd pw=0", "mlserver pw=0"),
        ("inferd pw=1", "mlserver pw=0"),
    ]
    assert bench.settings == {"debug": False}
    o = bench.options
    assert (o.duration, o.warmup, o.rounds) == (5.0, 2.0, 2)


def test_the_scenario_flags() -> None:
    argv = ["--transports", "sse", "--connections", "4", "32", "--clients", "3", "--workers", "2"]
    bench = scenario(*argv, "--responses", "10", "--only", "inferd", "--duration", "2.5")
    assert [case.name for case in bench.cases()] == ["sse c4", "sse c32"]
    assert [case.load for case in bench.cases()] == [StreamLoad(4, 3), StreamLoad(32, 3)]
    assert [c.label for c in bench.cases()[0].contenders] == ["inferd pw=2"]
    assert "10 responses/stream, 3 load processes" in bench.describe()
    assert bench.comparisons(["inferd pw=2"]) == []
    with pytest.raises(SystemExit):
        scenario("--transports", "websocket")
    with pytest.raises(SystemExit):
        scenario("--parallel-workers", "1")  # the scenario varies it itself: --workers


def test_the_grpc_floor_joins_the_grpc_cases_only() -> None:
    bench = scenario("--reference")
    grpc_case, sse_case = bench.cases()
    names = [c.label for c in grpc_case.contenders]
    assert names == ["inferd pw=0", "inferd pw=1", "mlserver pw=0", "floor"]
    assert [c.label for c in sse_case.contenders] == names[:3]
    assert bench.comparisons(names) == [
        ("inferd pw=0", "mlserver pw=0"),
        ("inferd pw=1", "mlserver pw=0"),
        ("floor", "mlserver pw=0"),
        ("inferd pw=0", "floor"),
        ("inferd pw=1", "floor"),
    ]


def test_each_server_gets_its_own_class_of_the_count_model(tmp_path: Path) -> None:
    bench = scenario("--reference")
    case = bench.cases()[0]
    classes = ["CountInferd", "CountInferd", "CountMLServer", "CountInferd"]
    for contender, implementation in zip(case.contenders, classes, strict=True):
        repo = tmp_path / contender.slug
        bench.write_repository(repo, contender, case)
        settings = json.loads((repo / "count" / "model-settings.json").read_text())
        assert settings == {"name": "count", "implementation": f"count.{implementation}"}
        assert (repo / "count" / "count.py").read_text() == COUNT_MODULE


@pytest.mark.anyio
async def test_the_count_model_streams_0_to_n_minus_1_in_inferd(tmp_path: Path) -> None:
    folder = write_count_model(tmp_path, "count.CountInferd")
    source = folder / "model-settings.json"
    settings = model_settings_from_dict(json.loads(source.read_text()), source)
    pool = InProcessPool()
    await pool.start()
    try:
        loaded = await pool.load(1, settings)
        assert loaded.streams and loaded.interleaved_streams and not loaded.predicts
        request = InferenceRequest([Tensor("n", np.array([4], dtype=np.int32))])
        responses = [response async for response in pool.stream(Call(1, request))]
    finally:
        await pool.close()
    assert [r.outputs[0].data.tolist() for r in responses] == [[0], [1], [2], [3]]
    assert {(r.outputs[0].name, r.outputs[0].data.dtype) for r in responses} == {
        ("i", np.dtype(np.int32))
    }


def test_the_requests_ask_for_n_responses() -> None:
    assert json.loads(json_request(7)) == {
        "inputs": [{"name": "n", "shape": [1], "datatype": "INT32", "data": [7]}]
    }
    request = pb.ModelInferRequest.FromString(grpc_request(7))
    assert request.model_name == "count"
    assert (request.inputs[0].name, request.inputs[0].datatype) == ("n", "INT32")
    assert list(request.inputs[0].contents.int_contents) == [7]
    assert not request.parameters
    final = pb.ModelInferRequest.FromString(grpc_request(7, final_response=True))
    assert final.parameters["triton_enable_empty_final_response"].bool_param


def stream_record(label: str, round_index: int, rate: float) -> RunRecord:
    tally = {"streams": 10, "responses": int(rate), "failed": 0, "problems": [],
             "stream_ms": [5.0], "first_ms": [1.0], "elapsed_s": 1.0, "cpu_s": 0.01}  # fmt: skip
    return RunRecord("grpc c16", label, round_index, 1.0, combine([tally]), 50.0, 40.0)


def test_rates_are_reported_as_responses_per_second() -> None:
    record = stream_record("inferd pw=0", 0, 9000)
    line = format_run(record)
    assert "9000.0 resp/s" in line and "CPU    50 us/resp" in line and "10 streams" in line
    assert unit_of([record], "grpc c16") == "resp"
    assert unit_of([record], "other") == "req"
    row = {"runs": 1, "errors": 0, "requests_per_s": 9000.0, "p50_ms": 5.0, "p99_ms": 5.0,
           "cpu_us_per_request": 50.0, "main_thread_us_per_request": 40.0}  # fmt: skip
    assert format_table({"inferd pw=0": row}, "resp")[0].split()[2:3] == ["resp/s"]
    ratio = format_ratio("a", "b", {"requests_per_s": 3.0, "cpu_us_per_request": 0.5}, "resp")
    assert ratio.startswith("a/b: resp/s x3.00") and "CPU/response x0.50" in ratio
    assert LoadResult.unit == "req"


def test_the_notes_say_whether_inferd_reaches_three_times_mlserver() -> None:
    bench = scenario()
    summary = {
        "grpc c16": {
            "inferd pw=0": {"requests_per_s": 9000.0},
            "inferd pw=1": {"requests_per_s": 6000.0},
            "mlserver pw=0": {"requests_per_s": 2500.0},
            "floor": {"requests_per_s": 7500.0},
        },
        "sse c16": {"inferd pw=0": {"requests_per_s": 9000.0}},  # MLServer failed: no ratio
    }
    assert bench.notes(summary) == [
        "grpc c16: inferd pw=0 3.60x mlserver pw=0's responses/s (target 3x: met)",
        "grpc c16: inferd pw=1 2.40x mlserver pw=0's responses/s (target 3x: NOT met)",
        "grpc c16: floor/mlserver pw=0 3.00x: the most a grpcio-based server could show here",
    ]


def test_the_grpc_floor_streams_the_count_for_a_count_repository(tmp_path: Path) -> None:
    write_count_model(tmp_path, "count.CountInferd")
    handler = one_method(tmp_path)
    method = MagicMock(method=MODEL_STREAM_INFER)
    assert handler.service(method) is not None
    assert handler.service(MagicMock(method="/inference.GRPCInferenceService/ModelInfer")) is None
    read = grpc_reader(wrapped=True)
    assert [read(answer) for answer in count_answers(grpc_request(5))] == [0, 1, 2, 3, 4]
