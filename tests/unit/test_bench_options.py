"""``python -m benchmarks``'s command line: scenario defaults, servers, paths."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.options import MLSERVER_PYTHON_ENV, Options, parse_options
from benchmarks.scenarios import SCENARIOS
from benchmarks.servers import AS_OPTION, CHECKOUT_SRC

SPECS = list(SCENARIOS.values())


def parse(*argv: str) -> Options:
    return parse_options(SPECS, list(argv))


@pytest.fixture(autouse=True)
def no_mlserver_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MLSERVER_PYTHON_ENV, raising=False)


def test_every_scenario_is_offered() -> None:
    assert list(SCENARIOS) == [
        "rest", "grpc", "grpc-floor", "workers", "batching", "fairness", "overload", "metrics",
        "sklearn-onnx", "streaming", "tls", "cache", "shm", "tracing", "mlmodel",
        "openai", "composition",
    ]  # fmt: skip


def test_grpc_floor_runs_the_floor_inferd_at_1_and_its_default_and_triton_when_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from benchmarks.scenarios.grpc_floor import TRITON_PYTHON_ENV, GrpcFloor

    monkeypatch.delenv(TRITON_PYTHON_ENV, raising=False)
    alone = GrpcFloor(parse("grpc-floor"))
    assert alone.options.connections == (32,) and alone.options.args.streams == 4
    contenders = {c.label: c.protocol_processes for c in alone.contenders()}
    assert contenders == {"floor": AS_OPTION, "inferd": 1, "inferd default": None}
    monkeypatch.setenv(TRITON_PYTHON_ENV, sys.executable)
    with_triton = GrpcFloor(parse("grpc-floor"))
    assert with_triton.options.programs.triton_python == sys.executable
    labels = [c.label for c in with_triton.contenders()]
    assert labels[-1] == "triton"
    assert ("inferd", "triton") in with_triton.comparisons(labels)


def test_openai_measures_1_and_16_streams_and_takes_the_peers_pythons_from_the_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("INFERD_BENCH_LITSERVE_PYTHON", raising=False)
    monkeypatch.delenv("INFERD_BENCH_VLLM_PYTHON", raising=False)
    alone = parse("openai")
    assert alone.connections == (1, 16) and alone.programs.litserve_python is None
    assert alone.programs.vllm_python is None
    assert alone.args.max_tokens == 32
    monkeypatch.setenv("INFERD_BENCH_LITSERVE_PYTHON", sys.executable)
    assert parse("openai").programs.litserve_python == sys.executable
    with pytest.raises(SystemExit):
        parse("openai", "--litserve-python", "/no/such/python")
    monkeypatch.setenv("INFERD_BENCH_VLLM_PYTHON", sys.executable)
    assert parse("openai").programs.vllm_python == sys.executable
    with pytest.raises(SystemExit):
        parse("openai", "--vllm-python", "/no/such/python")


def test_rest_defaults() -> None:
    options = parse("rest")
    assert (options.duration, options.warmup, options.rounds) == (10.0, 3.0, 2)
    assert options.connections == (16,) and options.parallel_workers == 0
    assert options.programs.inferd_python == sys.executable
    assert options.programs.inferd_src == CHECKOUT_SRC.resolve()
    assert options.baseline_src is None and options.extra_settings == {}


def test_scenarios_bring_their_own_defaults_and_flags() -> None:
    batching = parse("batching")
    assert batching.connections == (1, 16, 64) and batching.parallel_workers == 1
    workers = parse("workers", "--workers", "1", "4", "--models", "busy")
    assert (workers.duration, workers.warmup, workers.rounds) == (8.0, 2.0, 1)
    assert workers.args.workers == [1, 4] and workers.args.models == ["busy"]
    grpc = parse("grpc", "--streams", "4", "--encoding", "raw", "--reference")
    assert (grpc.args.streams, grpc.args.encoding, grpc.args.reference) == (4, "raw", True)
    assert parse("metrics", "--asgi-requests", "10").args.asgi_requests == 10
    assert parse("sklearn-onnx", "--repeats", "3").args.repeats == 3


@pytest.mark.parametrize(
    ("scenario", "flag"),
    [
        ("workers", "--parallel-workers"),  # it compares its own --workers values
        ("grpc", "--wrk-timeout"),  # h2load, not wrk
        ("metrics", "--mlserver-python"),  # inferd against itself
        ("sklearn-onnx", "--only"),
    ],
)
def test_a_flag_a_scenario_would_ignore_is_refused(scenario: str, flag: str) -> None:
    with pytest.raises(SystemExit):
        parse(scenario, flag, "1")


def test_mlserver_joins_when_its_python_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse("rest").servers == ("inferd",)
    assert parse("rest", "--mlserver-python", sys.executable).servers == ("inferd", "mlserver")
    monkeypatch.setenv(MLSERVER_PYTHON_ENV, sys.executable)
    options = parse("rest")
    assert options.servers == ("inferd", "mlserver")
    assert options.programs.mlserver_python == sys.executable
    assert parse("rest", "--only", "inferd").servers == ("inferd",)
    assert parse("rest", "--only", "mlserver").servers == ("mlserver",)


def test_mlserver_without_its_python_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("rest", "--only", "both")
    assert MLSERVER_PYTHON_ENV in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse("rest", "--mlserver-python", "/no/such/python")


def test_extra_settings_must_be_a_json_object() -> None:
    assert parse("rest", "--extra-settings", '{"debug": false}').extra_settings == {"debug": False}
    with pytest.raises(SystemExit):
        parse("rest", "--extra-settings", "[1]")


def test_baseline_src_is_a_checkout_or_its_src(tmp_path: Path) -> None:
    package = tmp_path / "src" / "inferd"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assert parse("rest", "--baseline-src", str(tmp_path)).baseline_src == tmp_path / "src"
    src = parse("rest", "--baseline-src", str(tmp_path / "src")).baseline_src
    assert src == tmp_path / "src"
    with pytest.raises(SystemExit):
        parse("rest", "--baseline-src", str(tmp_path / "src" / "inferd"))


def test_nonsense_counts_are_refused() -> None:
    for argv in (["--connections", "0"], ["--duration", "0"], ["--rounds", "-1"]):
        with pytest.raises(SystemExit):
            parse("rest", *argv)


def test_wrk_runs_whole_seconds_h2load_any(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--duration", "1.5"], ["--warmup", "0.5"]):
        with pytest.raises(SystemExit):
            parse("rest", *argv)
        assert "wrk runs whole seconds" in capsys.readouterr().err
    assert parse("grpc", "--duration", "1.5", "--warmup", "0.5").duration == 1.5


def test_inferd_runs_one_protocol_process_unless_told_otherwise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert parse("rest").protocol_processes == 1
    assert parse("grpc", "--protocol-processes", "4").protocol_processes == 4
    assert parse("rest", "--protocol-processes", "default").protocol_processes is None
    for bad in ("0", "cpu_count", "-1"):
        with pytest.raises(SystemExit):
            parse("rest", "--protocol-processes", bad)
        assert "is not a count >= 1 or 'default'" in capsys.readouterr().err


def test_every_run_says_how_many_protocol_processes_inferd_ran() -> None:
    from benchmarks.sidebyside import describe_setup, processes_label

    assert processes_label(1) == "1 protocol process"
    assert processes_label(4) == "4 protocol processes"
    assert processes_label(None) == "its default protocol processes (the CPUs it may use)"
    assert describe_setup(parse("rest", "--protocol-processes", "2"))["protocol_processes"] == 2


def test_a_relative_python_is_made_absolute_not_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server starts in its own folder, where a relative path finds nothing; a
    virtualenv's python is a link that must stay inside its virtualenv."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    relative = "venv/bin/python"
    options = parse("openai", "--vllm-python", relative, "--inferd-python", relative)
    assert options.programs.vllm_python == str(bin_dir / "python")
    assert options.programs.inferd_python == str(bin_dir / "python")


def test_servers_get_a_session_each_unless_asked_to_share_this_one() -> None:
    assert parse("openai").shared_session is False
    assert parse("openai", "--shared-session").shared_session is True
