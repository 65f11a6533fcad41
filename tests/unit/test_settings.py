"""Server and model settings: MLServer's names and defaults, precedence, messages."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import ConfigurationError
from inferd.settings import ServerSettings
from inferd.settings_loader import (
    load_model_settings,
    load_server_settings,
    model_settings_from_dict,
    model_settings_from_env,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No INFERD_* / MLSERVER_* variables leak in from the machine running the tests."""
    for key in list(os.environ):
        if key.upper().startswith(("INFERD_", "MLSERVER_")):
            monkeypatch.delenv(key)


def write_server_settings(folder: Path, settings: dict[str, Any]) -> Path:
    (folder / "settings.json").write_text(json.dumps(settings))
    return folder


def write_model(folder: Path, settings: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model-settings.json"
    path.write_text(json.dumps(settings))
    return path


def config_error(call: Any, *args: Any) -> str:
    with pytest.raises(ConfigurationError) as raised:
        call(*args)
    return str(raised.value)


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
        {"environments_dir": "/envs", "metrics_dir": "/metrics", "tracing_server": "t:1"},
    )
    with caplog.at_level(logging.WARNING, logger="inferd.settings_loader"):
        settings = load_server_settings(tmp_path)
    assert settings.ignored_settings() == ["environments_dir", "metrics_dir", "tracing_server"]
    warned = caplog.text
    for name in ("environments_dir", "metrics_dir", "tracing_server"):
        assert f"Setting {name!r} is accepted for MLServer compatibility" in warned


def test_no_warning_for_settings_left_at_their_defaults() -> None:
    assert ServerSettings().ignored_settings() == []


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


# Model settings


def test_name_and_uri_default_to_the_folder(tmp_path: Path) -> None:
    path = write_model(tmp_path / "iris", {"implementation": "x.Y"})
    settings = load_model_settings(path)
    assert settings.name == "iris"
    assert settings.uri == tmp_path / "iris"
    assert settings.version is None
    assert settings.source == path


def test_mlserver_model_settings_are_read(tmp_path: Path) -> None:
    path = write_model(
        tmp_path / "folder",
        {
            "name": "mnist-svm",
            "implementation": "mlserver_sklearn.SKLearnModel",
            "platform": "sklearn",
            "versions": ["sklearn/1.3"],
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}],
            "outputs": [{"name": "y", "datatype": "INT64", "shape": [-1, 1]}],
            "max_batch_size": 8,
            "max_batch_time": 0.01,
            "parameters": {
                "uri": "./mnist-svm.joblib",
                "version": "v0.1.0",
                "content_type": "np",
                "extra": {"predict_fn": "predict_proba"},
            },
        },
    )
    settings = load_model_settings(path)
    assert settings.name == "mnist-svm"
    assert settings.uri == tmp_path / "folder" / "mnist-svm.joblib"
    assert settings.version == "v0.1.0"
    assert settings.extra == {"predict_fn": "predict_proba"}
    assert (settings.max_batch_size, settings.max_batch_time) == (8, 0.01)
    assert [tensor.name for tensor in settings.inputs] == ["x"]
    assert settings.parameters is not None and settings.parameters.content_type == "np"


def test_an_absolute_uri_is_kept(tmp_path: Path) -> None:
    path = write_model(tmp_path / "m", {"parameters": {"uri": "/data/model.joblib"}})
    assert load_model_settings(path).uri == Path("/data/model.joblib")


def test_model_variables_win_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_model(
        tmp_path / "m", {"name": "from-file", "max_batch_size": 4, "parameters": {"version": "1"}}
    )
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "from-mlserver-env")
    monkeypatch.setenv("INFERD_MODEL_MAX_BATCH_SIZE", "16")
    monkeypatch.setenv("MLSERVER_MODEL_VERSION", "2")
    settings = load_model_settings(path)
    assert (settings.name, settings.max_batch_size, settings.version) == (
        "from-mlserver-env",
        16,
        "2",
    )
    monkeypatch.setenv("INFERD_MODEL_NAME", "from-inferd-env")
    assert load_model_settings(path).name == "from-inferd-env"


def test_a_relative_uri_from_the_environment_is_relative_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_model(tmp_path / "m", {"parameters": {"uri": "./in-folder.joblib"}})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLSERVER_MODEL_URI", "artifacts/model.joblib")
    assert load_model_settings(path).uri == tmp_path / "artifacts" / "model.joblib"


def test_extra_from_the_environment_is_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLSERVER_MODEL_EXTRA", '{"predict_fn": "predict_proba"}')
    assert model_settings_from_dict({}, None).extra == {"predict_fn": "predict_proba"}
    monkeypatch.setenv("MLSERVER_MODEL_EXTRA", "{broken")
    message = config_error(model_settings_from_dict, {}, None)
    assert "environment variable MLSERVER_MODEL_EXTRA must hold JSON" in message


def test_a_uri_outside_parameters_is_pointed_to_its_place(tmp_path: Path) -> None:
    path = write_model(tmp_path / "m", {"uri": "./model.joblib"})
    message = config_error(load_model_settings, path)
    assert str(path) in message
    assert "uri: unknown setting; did you mean 'parameters.uri'?" in message


def test_every_problem_in_a_model_file_is_named_with_its_full_key(tmp_path: Path) -> None:
    path = write_model(
        tmp_path / "m",
        {
            "max_batch_size": -1,
            "inputs": [{"name": "x", "datatype": "FLOAT", "shape": [1]}, {"name": "y"}],
            "parameters": {"version": ["1"], "extra": "not a dict"},
        },
    )
    message = config_error(load_model_settings, path)
    assert message.startswith(f"{path}: invalid model settings:")
    assert "max_batch_size: Input should be greater than or equal to 0 (got -1)" in message
    assert "inputs.0.datatype: unknown datatype 'FLOAT'; expected one of BOOL" in message
    assert "inputs.1.datatype: Field required\n" in message
    assert "parameters.version: Input should be a valid string" in message
    assert "parameters.extra: Input should be a valid dictionary" in message


def test_parameters_must_be_an_object(tmp_path: Path) -> None:
    path = write_model(tmp_path / "m", {"parameters": ["uri"]})
    assert "parameters: must be a JSON object" in config_error(load_model_settings, path)


def test_a_missing_model_settings_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "gone" / "model-settings.json"
    assert config_error(load_model_settings, path) == f"{path}: file not found"


def test_ignored_model_settings_warn_once_per_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_model(
        tmp_path / "m", {"warm_workers": True, "parameters": {"environment_tarball": "e.tar.gz"}}
    )
    with caplog.at_level(logging.WARNING, logger="inferd.settings_loader"):
        settings = load_model_settings(path)
        load_model_settings(path)
    assert settings.ignored_settings() == ["warm_workers", "parameters.environment_tarball"]
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2
    assert all(message.startswith(str(path)) for message in warnings)


# A model from the environment alone (how KServe starts MLServer)


def test_no_model_variables_means_no_model() -> None:
    assert model_settings_from_env() is None


def test_a_model_from_the_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "iris")
    monkeypatch.setenv("MLSERVER_MODEL_IMPLEMENTATION", "mlserver_sklearn.SKLearnModel")
    monkeypatch.setenv("MLSERVER_MODEL_URI", "models/iris.joblib")
    settings = model_settings_from_env()
    assert settings is not None
    assert (settings.name, settings.implementation) == ("iris", "mlserver_sklearn.SKLearnModel")
    assert settings.uri == tmp_path / "models" / "iris.joblib"
    assert settings.source is None


def test_an_environment_model_needs_a_name_and_an_implementation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLSERVER_MODEL_URI", "/mnt/models")
    message = config_error(model_settings_from_env)
    assert "MLSERVER_MODEL_NAME" in message
    assert "MLSERVER_MODEL_IMPLEMENTATION" in message


def test_an_invalid_environment_model_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLSERVER_MODEL_NAME", "m")
    monkeypatch.setenv("MLSERVER_MODEL_IMPLEMENTATION", "a.B")
    monkeypatch.setenv("MLSERVER_MODEL_MAX_BATCH_TIME", "soon")
    message = config_error(model_settings_from_env)
    assert message.startswith("model settings from the environment: invalid model settings:")
    assert "max_batch_time" in message
    assert "from environment variable MLSERVER_MODEL_MAX_BATCH_TIME" in message
