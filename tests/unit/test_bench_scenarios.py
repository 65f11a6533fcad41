"""What each benchmark scenario declares: contenders, cases, ratios, repositories, commands."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import joblib
import pytest

from benchmarks.loadgen import H2load, Wrk
from benchmarks.openload import OpenLoad
from benchmarks.options import MLSERVER_PYTHON_ENV, parse_options
from benchmarks.repository import (
    ROW,
    busy_module,
    predicted_class,
    settings_json,
    v2_request,
)
from benchmarks.scenarios import SCENARIOS, Scenario
from benchmarks.scenarios.grpc import grpc_frame, infer_request, predicted_class_of
from benchmarks.scenarios.overload import doubled
from benchmarks.servers import (
    Contender,
    Programs,
    _cpu_ticks,
    baseline_pairs,
    command_and_env,
    group_cpu_seconds,
    main_thread_cpu_seconds,
    ready_path,
    ready_port,
    with_baseline,
)
from inferd.protocol import pb


@pytest.fixture(autouse=True)
def mlserver_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MLSERVER_PYTHON_ENV, sys.executable)


@pytest.fixture
def baseline(tmp_path: Path) -> Path:
    (tmp_path / "src" / "inferd").mkdir(parents=True)
    (tmp_path / "src" / "inferd" / "__init__.py").write_text("")
    return tmp_path


def scenario(*argv: str) -> Scenario:
    options = parse_options(list(SCENARIOS.values()), list(argv))
    return SCENARIOS[options.scenario](options)


def labels(bench: Scenario) -> list[list[str]]:
    return [[c.label for c in case.contenders] for case in bench.cases()]


def test_rest_compares_inferd_its_baseline_and_mlserver(baseline: Path) -> None:
    bench = scenario("rest", "--baseline-src", str(baseline), "--connections", "1", "8")
    cases = bench.cases()
    assert [case.name for case in cases] == ["c1", "c8"]
    assert [case.load for case in cases] == [Wrk(1), Wrk(8)]
    assert labels(bench)[0] == ["inferd", "inferd@baseline", "mlserver"]
    assert cases[0].contenders[1].source == baseline / "src"
    assert bench.comparisons(labels(bench)[0]) == [
        ("inferd", "mlserver"),
        ("inferd", "inferd@baseline"),
    ]


def test_a_ratio_is_offered_only_for_contenders_that_ran() -> None:
    assert scenario("rest").comparisons(["inferd"]) == []


def test_grpc_adds_the_floors_and_their_ratios() -> None:
    bench = scenario("grpc", "--reference", "--envoy-floor", "/opt/pyvoy", "--streams", "2")
    assert bench.cases()[0].load == H2load(16, 2, 1)
    names = labels(bench)[0]
    assert names == ["inferd", "mlserver", "floor", "envoy-floor"]
    assert bench.comparisons(names) == [
        ("inferd", "mlserver"),
        ("inferd", "floor"),
        ("mlserver", "floor"),
        ("floor", "mlserver"),
        ("envoy-floor", "floor"),
    ]
    assert bench.options.programs.pyvoy == "/opt/pyvoy"


def test_workers_compares_each_worker_count_against_mlserver_with_one(baseline: Path) -> None:
    bench = scenario("workers", "--workers", "1", "2", "--baseline-src", str(baseline))
    assert [case.name for case in bench.cases()] == ["busy c16", "iris c16"]
    names = labels(bench)[0]
    assert names == [
        "inferd pw=1", "inferd pw=1@baseline", "inferd pw=2", "inferd pw=2@baseline",
        "mlserver pw=1", "mlserver pw=2",
    ]  # fmt: skip
    assert bench.cases()[0].contenders[2].settings == {"parallel_workers": 2}
    pairs = bench.comparisons(names)
    assert ("inferd pw=2", "mlserver pw=1") in pairs
    assert ("mlserver pw=2", "mlserver pw=1") in pairs
    assert ("inferd pw=2", "inferd pw=2@baseline") in pairs


def test_metrics_compares_on_and_off_in_each_tree(baseline: Path) -> None:
    bench = scenario("metrics", "--baseline-src", str(baseline))
    names = labels(bench)[0]
    assert names == ["metrics-on", "metrics-on@baseline", "metrics-off", "metrics-off@baseline"]
    assert bench.comparisons(names) == [
        ("metrics-on", "metrics-off"),
        ("metrics-on@baseline", "metrics-off@baseline"),
        ("metrics-on", "metrics-on@baseline"),
        ("metrics-off", "metrics-off@baseline"),
    ]
    assert bench.cases()[0].contenders[2].settings == {"metrics_endpoint": ""}


def test_tls_compares_on_and_off_with_a_certificate_made_for_the_run() -> None:
    bench = scenario("tls")
    on, off = bench.cases()[0].contenders
    assert (on.label, off.label) == ("tls-on", "tls-off")
    assert bench.comparisons(["tls-on", "tls-off"]) == [("tls-on", "tls-off")]
    assert off.settings == {} and off.ca_file is None
    assert on.ca_file is not None and on.ca_file.is_file()
    assert {Path(on.settings[name]).is_file() for name in ("ssl_certfile", "ssl_keyfile")} == {True}


def test_cache_compares_on_and_off_and_turns_the_cache_on_in_both_files(tmp_path: Path) -> None:
    bench = scenario("cache")
    case = bench.cases()[0]
    on, off = case.contenders
    assert (on.label, off.label) == ("cache-on", "cache-off")
    assert bench.comparisons(["cache-on", "cache-off"]) == [("cache-on", "cache-off")]
    assert on.settings == {"cache_enabled": True} and off.settings == {}
    for contender in (on, off):
        bench.write_repository(tmp_path / contender.label, contender, case)
    model = json.loads((tmp_path / "cache-on" / "iris" / "model-settings.json").read_text())
    plain = json.loads((tmp_path / "cache-off" / "iris" / "model-settings.json").read_text())
    assert model["cache_enabled"] is True and "cache_enabled" not in plain


def test_sklearn_onnx_aims_each_contender_at_its_model(tmp_path: Path) -> None:
    bench = scenario("sklearn-onnx")
    case = bench.cases()[0]
    assert [bench.model_of(c, case) for c in case.contenders] == ["iris", "iris-onnx"]
    assert bench.comparisons(["iris", "iris-onnx"]) == [("iris-onnx", "iris")]
    bench.write_repository(tmp_path, case.contenders[0], case)
    onnx = json.loads((tmp_path / "iris-onnx" / "model-settings.json").read_text())
    assert onnx["parameters"] == {"uri": "./model.joblib", "extra": {"accelerate": "onnx"}}
    assert (tmp_path / "iris" / "model.joblib").is_file()


def test_batching_writes_the_batching_fields_into_the_model_settings(tmp_path: Path) -> None:
    bench = scenario("batching")
    case = bench.cases()[0]
    bench.write_repository(tmp_path, case.contenders[0], case)
    written = json.loads((tmp_path / "iris" / "model-settings.json").read_text())
    assert written["implementation"] == "mlserver_sklearn.SKLearnModel"
    assert (written["max_batch_size"], written["max_batch_time"]) == (32, 0.002)
    model = joblib.load(tmp_path / "iris" / "model.joblib")
    assert predicted_class(model) == bench.expected_class  # type: ignore[attr-defined]


def test_settings_layers_override_in_order() -> None:
    settings = settings_json([1, 2, 3], {"parallel_workers": 0, "debug": True}, {"debug": False})
    assert settings == {
        "host": "127.0.0.1", "http_port": 1, "grpc_port": 2, "metrics_port": 3,
        "parallel_workers": 0, "debug": False,
    }  # fmt: skip


def test_the_busy_model_module_runs_where_neither_framework_is_importable() -> None:
    namespace: dict[str, object] = {}
    exec(busy_module(1.0, 10), namespace)
    assert namespace["ITERATIONS"] == 10
    assert namespace["spin"](4) == 0 + 1 + 4 + 9  # type: ignore[operator]


def test_v2_request_shapes_the_rows() -> None:
    body = v2_request([ROW, ROW], name="x", datatype="FP64", outputs=["predict"])
    assert body["inputs"] == [{"name": "x", "shape": [2, 4], "datatype": "FP64", "data": ROW + ROW}]
    assert body["outputs"] == [{"name": "predict"}]


def test_grpc_framing_and_the_answer_check() -> None:
    request = infer_request("raw")
    assert request.raw_input_contents and not request.inputs[0].contents.fp32_contents
    assert list(infer_request("typed").inputs[0].contents.fp32_contents) == pytest.approx(ROW)
    assert grpc_frame(b"abc") == b"\x00\x00\x00\x00\x03abc"
    response = pb.ModelInferResponse()
    response.outputs.add(name="predict", datatype="INT64", shape=[1, 1])
    response.raw_output_contents.append((2).to_bytes(8, "little"))
    assert predicted_class_of(response.SerializeToString()) == 2
    typed = pb.ModelInferResponse()
    typed.outputs.add(name="predict", datatype="INT64", shape=[1]).contents.int64_contents.append(1)
    assert predicted_class_of(typed.SerializeToString()) == 1


def test_server_commands_and_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERD_HTTP_PORT", "1")
    monkeypatch.setenv("MLSERVER_MODELS_DIR", "/x")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    programs = Programs("/py/inferd", Path("/src/current"), "/py/mlserver", "/bin/pyvoy")
    repo = Path("/repo")
    command, env = command_and_env(Contender("inferd", "inferd"), programs, repo, 9)
    assert command == ["/py/inferd", "-m", "inferd", "start", "/repo"]
    assert env["PYTHONPATH"] == "/src/current"
    assert not any(k.startswith(("INFERD_", "MLSERVER_")) for k in env)
    twin = Contender("inferd@baseline", "inferd", source=Path("/src/old"))
    assert command_and_env(twin, programs, repo, 9)[1]["PYTHONPATH"] == "/src/old"
    command, env = command_and_env(Contender("mlserver", "mlserver"), programs, repo, 9)
    assert command[:2] == ["/py/mlserver", "-c"] and command[-2:] == ["start", "/repo"]
    assert "PYTHONPATH" not in env
    command, _ = command_and_env(Contender("floor", "floor"), programs, repo, 9)
    assert command[0] == "/py/inferd" and command[1].endswith("grpc_floor_server.py")
    command, env = command_and_env(Contender("envoy-floor", "envoy-floor"), programs, repo, 9)
    assert command[:5] == ["/bin/pyvoy", "--address", "127.0.0.1", "--port", "9"]
    assert env["INFERD_FLOOR_REPO"] == "/repo"
    assert env["PYTHONPATH"].split(os.pathsep)[1] == "/src/current"
    assert ready_port(Contender("envoy-floor", "envoy-floor"), [7, 8, 9]) == 8
    assert ready_port(Contender("inferd", "inferd"), [7, 8, 9]) == 7


def test_vllm_serves_its_folder_as_the_scenarios_model(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"http_port": 8123}')
    programs = Programs("/py/inferd", vllm_python="/py/vllm")
    vllm = Contender("vllm", "vllm", model="chat-lm")
    command, env = command_and_env(vllm, programs, tmp_path, 9)
    assert command[:3] == ["/py/vllm", "-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(command[3::2], command[4::2], strict=False))
    assert flags["--model"] == str(tmp_path / "vllm-model")
    assert (flags["--served-model-name"], flags["--port"]) == ("chat-lm", "8123")
    assert flags["--dtype"] == "float32" and "PYTHONPATH" not in env
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # GiB, not most of the machine's memory
    assert ready_path(vllm) == "/v1/models"
    with pytest.raises(ValueError, match="--vllm-python"):
        command_and_env(vllm, Programs("/py/inferd"), tmp_path, 9)


def test_openai_runs_vllm_beside_inferd_when_given_its_python() -> None:
    bench = scenario("openai", "--vllm-python", sys.executable)
    assert labels(bench) == [["inferd", "vllm"], ["inferd", "vllm"]]
    assert bench.comparisons(["inferd", "vllm"]) == [("inferd", "vllm")]
    assert "vLLM left out" not in bench.describe()
    assert "vLLM left out (no --vllm-python)" in scenario("openai").describe()


def test_openai_without_hf_compares_the_vllm_runtime_with_vllm_alone() -> None:
    bench = scenario("openai", "--without-hf", "--vllm-runtime", "--vllm-python", sys.executable)
    assert labels(bench) == [["inferd-vllm", "vllm"], ["inferd-vllm", "vllm"]]
    assert bench.comparisons(["inferd-vllm", "vllm"]) == [("inferd-vllm", "vllm")]
    with pytest.raises(SystemExit, match="no server to run"):
        scenario("openai", "--without-hf").cases()


def test_protocol_processes_reach_inferd_through_its_environment() -> None:
    programs = Programs("/py/inferd", Path("/src/current"), "/py/mlserver")
    inferd, mlserver = Contender("inferd", "inferd"), Contender("mlserver", "mlserver")
    _, env = command_and_env(inferd, programs, Path("/repo"), 9, protocol_processes=1)
    assert env["INFERD_PROTOCOL_PROCESSES"] == "1"  # a tree without the setting ignores it
    _, env = command_and_env(inferd, programs, Path("/repo"), 9, protocol_processes=None)
    assert "INFERD_PROTOCOL_PROCESSES" not in env  # the server's own default
    _, env = command_and_env(mlserver, programs, Path("/repo"), 9, protocol_processes=1)
    assert "INFERD_PROTOCOL_PROCESSES" not in env


def test_baseline_twins_follow_their_inferd_contender() -> None:
    contenders = [Contender("a", "inferd"), Contender("m", "mlserver"), Contender("b", "inferd")]
    twins = with_baseline(contenders, Path("/old"))
    assert [c.label for c in twins] == ["a", "a@baseline", "m", "b", "b@baseline"]
    assert with_baseline(contenders, None) == contenders
    assert baseline_pairs(["a", "a@baseline", "m"]) == [("a", "a@baseline")]
    assert Contender("inferd pw=1@baseline", "inferd").slug == "inferd_pw_1_baseline"


def test_cpu_figures_come_from_proc() -> None:
    stat = "42 (a (weird) name) S 1 77 77 0 -1 0 0 0 0 0 150 25 0 0"
    assert _cpu_ticks(stat) == (77, 175)
    if not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    group = group_cpu_seconds(os.getpgid(0))
    assert group is not None and group > 0
    assert main_thread_cpu_seconds(os.getpid()) is not None


def test_fairness_runs_in_process_with_and_without_batching(tmp_path: Path, baseline: Path) -> None:
    bench = scenario("fairness", "--baseline-src", str(baseline))
    assert bench.options.parallel_workers == 0
    assert [case.name for case in bench.cases()] == ["plain c64", "batching c64"]
    assert labels(bench)[0] == ["inferd", "inferd@baseline", "mlserver"]
    written = {}
    for case in bench.cases():
        bench.write_repository(tmp_path / case.name, case.contenders[0], case)
        settings = json.loads((tmp_path / case.name / "iris" / "model-settings.json").read_text())
        written[case.name] = settings.get("max_batch_size")
    assert written == {"plain c64": None, "batching c64": 32}


def test_fairness_notes_say_which_tails_are_over_the_bar() -> None:
    bench = scenario("fairness")
    summary = {"plain c64": {"fair": {"p50_ms": 10.0, "p99_ms": 30.0},
                             "unfair": {"p50_ms": 10.0, "p99_ms": 200.0}}}  # fmt: skip
    fair, unfair = bench.notes(summary)
    assert fair.startswith("plain c64 fair: p99/p50 3.0") and fair.endswith("ok")
    assert unfair.startswith("plain c64 unfair: p99/p50 20.0") and unfair.endswith("over 4x")


def test_overload_offers_ten_times_what_the_model_serves_to_each_queue_bound(
    tmp_path: Path,
) -> None:
    bench = scenario("overload", "--queue-sizes", "16", "0", "--service-ms", "20")
    (case,) = bench.cases()
    assert [c.label for c in case.contenders] == ["inferd q=16", "inferd q=0", "mlserver"]
    assert case.contenders[0].settings == {"max_queue_size": 16}
    assert bench.options.parallel_workers == 1
    assert isinstance(case.load, OpenLoad) and case.load.rate == 500.0
    assert case.load.max_outstanding == 2000
    bench.write_repository(tmp_path, case.contenders[2], case)
    written = json.loads((tmp_path / "sleep" / "model-settings.json").read_text())
    assert written["implementation"] == "sleep.SleepMLServer"
    assert "SECONDS = 20.0 / 1000" in (tmp_path / "sleep" / "sleep.py").read_text()


def test_overload_checks_answers_as_float32() -> None:
    assert doubled(
        b'{"outputs": [{"data": [10.199999809265137, 7.0, 2.799999952316284, 0.4000000059604645]}]}'
    )
    assert doubled(b'{"outputs": [{"data": [10.2, 7.0, 2.8, 0.4]}]}')
    assert not doubled(b'{"outputs": [{"data": [5.1, 3.5, 1.4, 0.2]}]}')
    assert not doubled(b'{"error": "full"}')
