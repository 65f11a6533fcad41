"""Server settings: MLServer's names and defaults, precedence, messages."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from inferd.settings import ServerSettings
from inferd.settings.loader import (
    load_server_settings,
)
from inferd.settings.server import DEFAULT_MAX_QUEUE_SIZE

from .settings_helpers import config_error, write_server_settings

# Server settings: defaults and precedence


def test_defaults_are_mlservers(tmp_path: Path) -> None:
    settings = load_server_settings(tmp_path)
    assert (settings.host, settings.http_port, settings.grpc_port, settings.metrics_port) == (
        "0.0.0.0",
        8080,
        8081,
        8082,
    )
    assert settings.parallel_workers == 1
    assert settings.load_models_at_startup is True
    assert settings.debug is False
    assert settings.gzip_enabled is True
    assert settings.cors_settings is None
    assert settings.server_name == "inferd"
    assert settings.model_repository_root == str(tmp_path)


def test_the_queue_bound_is_server_wide_by_default_and_settable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_server_settings(tmp_path).max_queue_size == DEFAULT_MAX_QUEUE_SIZE > 0
    write_server_settings(tmp_path, {"max_queue_size": 0})
    assert load_server_settings(tmp_path).max_queue_size == 0
    monkeypatch.setenv("INFERD_MAX_QUEUE_SIZE", "64")
    assert load_server_settings(tmp_path).max_queue_size == 64
    write_server_settings(tmp_path, {"max_queue_size": -1})
    monkeypatch.delenv("INFERD_MAX_QUEUE_SIZE")
    assert "max_queue_size" in config_error(load_server_settings, tmp_path)


def test_the_file_wins_over_the_default(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"http_port": 9000, "debug": True, "server_name": "s"})
    settings = load_server_settings(tmp_path)
    assert (settings.http_port, settings.debug, settings.server_name) == (9000, True, "s")
    assert settings.grpc_port == 8081


def test_the_environment_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_server_settings(tmp_path, {"http_port": 9000, "grpc_port": 9001})
    monkeypatch.setenv("MLSERVER_HTTP_PORT", "9100")
    monkeypatch.setenv("INFERD_GRPC_PORT", "9101")
    settings = load_server_settings(tmp_path)
    assert (settings.http_port, settings.grpc_port) == (9100, 9101)


def test_inferd_variables_win_over_mlserver_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSERVER_HTTP_PORT", "9100")
    monkeypatch.setenv("INFERD_HTTP_PORT", "9200")
    assert load_server_settings(tmp_path).http_port == 9200


def test_overrides_win_over_the_file_but_not_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_server_settings(tmp_path, {"http_port": 9000, "grpc_port": 9001})
    monkeypatch.setenv("MLSERVER_GRPC_PORT", "9300")
    settings = load_server_settings(tmp_path, http_port=9500, grpc_port=9501)
    assert (settings.http_port, settings.grpc_port) == (9500, 9300)


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("1", True), ("false", False)])
def test_booleans_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, expected: bool
) -> None:
    monkeypatch.setenv("MLSERVER_DEBUG", text)
    assert load_server_settings(tmp_path).debug is expected


def test_mlservers_string_booleans_in_the_file(tmp_path: Path) -> None:
    # MLServer's own sklearn example writes {"debug": "true"}.
    write_server_settings(tmp_path, {"debug": "true", "load_models_at_startup": "false"})
    settings = load_server_settings(tmp_path)
    assert (settings.debug, settings.load_models_at_startup) == (True, False)


def test_nested_settings_from_the_environment_are_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "MLSERVER_CORS_SETTINGS", '{"allow_origins": ["https://a.example"], "max_age": 60}'
    )
    cors = load_server_settings(tmp_path).cors_settings
    assert cors is not None
    assert (cors.allow_origins, cors.max_age, cors.allow_methods) == (
        ["https://a.example"],
        60,
        ["GET"],
    )


def test_a_nested_environment_value_that_is_not_json_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSERVER_CORS_SETTINGS", "allow everything")
    message = config_error(load_server_settings, tmp_path)
    assert "cors_settings" in message
    assert "MLSERVER_CORS_SETTINGS" in message
    assert "JSON" in message


# parallel_workers


def test_cpu_count_is_the_cores_this_process_may_use(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"parallel_workers": "cpu_count"})
    assert load_server_settings(tmp_path).parallel_workers == len(os.sched_getaffinity(0))


def test_cpu_count_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERD_PARALLEL_WORKERS", "cpu_count")
    assert load_server_settings(tmp_path).parallel_workers == len(os.sched_getaffinity(0))


def test_zero_workers_runs_in_process_and_negative_is_refused(tmp_path: Path) -> None:
    assert load_server_settings(tmp_path, parallel_workers=0).parallel_workers == 0
    write_server_settings(tmp_path, {"parallel_workers": -1})
    message = config_error(load_server_settings, tmp_path)
    assert "parallel_workers: must be 0" in message


def test_the_shutdown_grace_fits_kubernetes_and_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_server_settings(tmp_path).shutdown_grace_seconds == 25  # under k8s' 30 s
    monkeypatch.setenv("INFERD_SHUTDOWN_GRACE_SECONDS", "7.5")
    assert load_server_settings(tmp_path).shutdown_grace_seconds == 7.5
    monkeypatch.setenv("INFERD_SHUTDOWN_GRACE_SECONDS", "0")
    assert "shutdown_grace_seconds" in config_error(load_server_settings, tmp_path)


# Validation messages name the file, the key and what is expected


def test_an_unknown_key_names_the_file_and_the_key_and_suggests_a_fix(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"http_prot": 9000})
    message = config_error(load_server_settings, tmp_path)
    assert str(tmp_path / "settings.json") in message
    assert "http_prot: unknown setting; did you mean 'http_port'?" in message


def test_a_wrong_type_says_what_is_expected(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"http_port": "eighty", "cors_settings": {"max_age": "x"}})
    message = config_error(load_server_settings, tmp_path)
    assert str(tmp_path / "settings.json") in message
    assert "http_port: Input should be a valid integer" in message
    assert "(got 'eighty')" in message
    assert "cors_settings.max_age: Input should be a valid integer" in message


def test_a_wrong_type_from_the_environment_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSERVER_HTTP_PORT", "eighty")
    message = config_error(load_server_settings, tmp_path)
    assert "http_port: Input should be a valid integer" in message
    assert "from environment variable MLSERVER_HTTP_PORT" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{not json", "cannot be read as JSON"), ("[1, 2]", "must hold a JSON object, got list")],
)
def test_a_settings_file_that_is_not_a_json_object(
    tmp_path: Path, text: str, expected: str
) -> None:
    (tmp_path / "settings.json").write_text(text)
    message = config_error(load_server_settings, tmp_path)
    assert message.startswith(str(tmp_path / "settings.json"))
    assert expected in message


def test_kafka_is_refused_with_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_server_settings(tmp_path, {"kafka_enabled": True})
    assert "kafka_enabled: inferd has no Kafka server" in config_error(
        load_server_settings, tmp_path
    )
    write_server_settings(tmp_path, {"kafka_enabled": False})
    monkeypatch.setenv("MLSERVER_KAFKA_ENABLED", "false")
    assert load_server_settings(tmp_path).kafka_enabled is False
    monkeypatch.setenv("MLSERVER_KAFKA_ENABLED", "true")
    assert "MLSERVER_KAFKA_ENABLED" in config_error(load_server_settings, tmp_path)


def test_settings_inferd_ignores_are_accepted_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_server_settings(
        tmp_path,
        {"metrics_dir": "/metrics"},
    )
    with caplog.at_level(logging.WARNING, logger="inferd.settings.loader"):
        settings = load_server_settings(tmp_path)
    assert settings.ignored_settings() == ["metrics_dir"]
    warned = caplog.text
    for name in ("metrics_dir",):
        assert f"Setting {name!r} is accepted for MLServer compatibility" in warned


def test_tracing_server_is_acted_on_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not ServerSettings().tracing_enabled
    write_server_settings(tmp_path, {"tracing_server": "collector:4317"})
    with caplog.at_level(logging.WARNING, logger="inferd.settings.loader"):
        settings = load_server_settings(tmp_path)
    assert settings.tracing_enabled and settings.ignored_settings() == []
    assert "tracing_server" not in caplog.text
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not settings.tracing_enabled


def test_the_standard_otlp_endpoint_variable_turns_tracing_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    assert ServerSettings().tracing_enabled


def test_no_warning_for_settings_left_at_their_defaults() -> None:
    assert ServerSettings().ignored_settings() == []


def test_the_response_cache_and_environments_dir_are_acted_on_not_warned_about(
    tmp_path: Path,
) -> None:
    settings = ServerSettings(cache_enabled=True, cache_size=5, environments_dir="/envs")
    assert settings.ignored_settings() == []
    write_server_settings(tmp_path, {"cache_size": 0})
    assert "cache_size" in config_error(load_server_settings, tmp_path)


# model_repository_root


def test_a_relative_repository_root_in_the_file_is_relative_to_its_folder(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"model_repository_root": "models"})
    assert load_server_settings(tmp_path).model_repository_root == str(tmp_path / "models")


def test_a_relative_repository_root_from_the_environment_is_relative_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLSERVER_MODEL_REPOSITORY_ROOT", "models")
    settings = load_server_settings(tmp_path / "elsewhere")
    assert settings.model_repository_root == str(tmp_path / "models")


def test_an_absolute_repository_root_is_kept(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"model_repository_root": "/srv/models"})
    assert load_server_settings(tmp_path).model_repository_root == "/srv/models"
