"""Model settings: MLServer's names and defaults, precedence, messages."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from inferd.settings.loader import (
    load_model_settings,
    model_settings_from_dict,
    model_settings_from_env,
)

from .settings_helpers import config_error, write_model

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


def test_the_queue_bound_is_the_servers_unless_the_model_sets_one(tmp_path: Path) -> None:
    unset = load_model_settings(write_model(tmp_path / "a", {"implementation": "x.Y"}))
    assert unset.max_queue_size is None
    explicit = {"implementation": "x.Y", "max_queue_size": 0}
    assert load_model_settings(write_model(tmp_path / "b", explicit)).max_queue_size == 0
    null = {"implementation": "x.Y", "max_queue_size": None}
    assert load_model_settings(write_model(tmp_path / "c", null)).max_queue_size is None


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


def test_fault_settings_default_to_retries_and_no_limit_and_the_limit_has_a_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_model(tmp_path / "m", {"retry_on_worker_failure": False})
    settings = load_model_settings(path)
    assert (settings.inference_timeout, settings.retry_on_worker_failure) == (None, False)
    assert model_settings_from_dict({}, None).retry_on_worker_failure is True
    monkeypatch.setenv("INFERD_MODEL_INFERENCE_TIMEOUT", "2.5")
    assert load_model_settings(path).inference_timeout == 2.5
    monkeypatch.setenv("INFERD_MODEL_INFERENCE_TIMEOUT", "-1")
    message = config_error(load_model_settings, path)
    assert "inference_timeout: Input should be greater than or equal to 0" in message
    assert "from environment variable INFERD_MODEL_INFERENCE_TIMEOUT" in message


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
        tmp_path / "m", {"warm_workers": True, "parameters": {"inference_pool_gid": "g"}}
    )
    with caplog.at_level(logging.WARNING, logger="inferd.settings.loader"):
        settings = load_model_settings(path)
        load_model_settings(path)
    assert settings.ignored_settings() == ["warm_workers", "parameters.inference_pool_gid"]
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
