"""`inferd settings` and the flags of `inferd start`, through click (no server starts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from inferd.cli import FLAGS, main
from inferd.settings.command_line import option_name

from .settings_helpers import write_server_settings


def run(*arguments: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(arguments), env=env)


def rows(output: str) -> dict[str, tuple[str, str]]:
    """The table's rows: setting -> (value, source)."""
    table: dict[str, tuple[str, str]] = {}
    for line in output.splitlines()[1:]:
        name, value, source = line.split(None, 2)
        table[name] = (value, source)
    return table


def test_settings_says_where_each_value_came_from(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"http_port": 9000, "grpc_port": 9001, "server_name": "f"})
    env = {"INFERD_GRPC_PORT": "7001", "MLSERVER_METRICS_PORT": "7002", "INFERD_DEBUG": "1"}
    result = run("settings", str(tmp_path), "--http-port", "5000", env=env)
    assert result.exit_code == 0, result.output
    assert result.output.split()[:3] == ["SETTING", "VALUE", "SOURCE"]
    table = rows(result.output)
    assert table["http_port"] == ("5000", "flag --http-port")
    assert table["grpc_port"] == ("7001", "environment INFERD_GRPC_PORT")
    assert table["metrics_port"] == ("7002", "environment MLSERVER_METRICS_PORT")
    assert table["debug"] == ("true", "environment INFERD_DEBUG")
    assert table["server_name"] == ("f", f"file {tmp_path / 'settings.json'}")
    assert table["host"] == ("0.0.0.0", "default")
    assert table["model_repository_root"] == (str(tmp_path), "argument MODEL_REPOSITORY")


def test_settings_as_json(tmp_path: Path) -> None:
    settings_file = tmp_path / "server.json"
    settings_file.write_text(json.dumps({"cors_settings": {"allow_origins": ["*"]}}))
    arguments = ["--model-repository", str(tmp_path), "--settings", str(settings_file)]
    result = run("settings", "--json", *arguments, "--log-level", "warning")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["log_level"] == {"value": "warning", "source": "flag", "from": "--log-level"}
    assert shown["cors_settings"]["value"]["allow_origins"] == ["*"]
    assert shown["cors_settings"]["source"] == "file"
    assert shown["cors_settings"]["from"] == str(settings_file)
    assert shown["model_repository_root"]["from"] == "--model-repository"
    assert shown["http_port"] == {"value": 8080, "source": "default", "from": None}


def test_the_folder_from_the_environment_or_the_current_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"MLSERVER_MODELS_DIR": str(tmp_path)}
    table = rows(run("settings", env=env).output)
    assert table["model_repository_root"] == (str(tmp_path), "environment MLSERVER_MODELS_DIR")
    assert rows(run("settings").output)["model_repository_root"] == (".", "default")


@pytest.mark.parametrize("command", ["start", "settings"])
def test_a_refused_flag_is_a_usage_error(command: str, tmp_path: Path) -> None:
    result = run(command, str(tmp_path), "--http-port", "eighty", "--parallel-workers", "-1")
    assert result.exit_code == 2, result.output
    assert "Usage:" in result.output
    assert "(got 'eighty' from option --http-port)" in result.output
    assert "parallel_workers: must be 0" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["start", "settings"])
def test_two_different_folders_are_a_usage_error(command: str, tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    result = run(command, str(tmp_path), "--model-repository", str(tmp_path / "b"))
    assert result.exit_code == 2
    assert "name different folders: give one of them" in result.output
    # The same folder twice is fine.
    same = run("settings", str(tmp_path), "--model-repository", f"{tmp_path}/b/..")
    assert same.exit_code == 0, same.output


def test_a_missing_settings_file_is_a_usage_error(tmp_path: Path) -> None:
    result = run("start", str(tmp_path), "--settings", str(tmp_path / "gone.json"))
    assert result.exit_code == 2
    assert "--settings" in result.output and "does not exist" in result.output


def test_a_bad_file_is_not_a_usage_error(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"http_port": "x"})
    result = run("settings", str(tmp_path))
    assert result.exit_code == 1
    assert f"{tmp_path / 'settings.json'}: invalid settings" in result.output


@pytest.mark.parametrize("command", ["start", "settings"])
def test_help_lists_every_flag_and_the_precedence(command: str) -> None:
    shown = run(command, "--help").output
    for name, _, _ in FLAGS:
        assert option_name(name) in shown
        assert f"INFERD_{name.upper()}" in shown
    for option in ("--model-repository FOLDER", "--settings FILE", "[MODEL_REPOSITORY]"):
        assert option in shown
    precedence = " ".join(shown.split())
    assert (
        "Each setting is taken from, first found: its flag; the environment "
        "(INFERD_<NAME>, then MLSERVER_<NAME>); settings.json; the default." in precedence
    )
