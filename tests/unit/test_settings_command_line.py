"""Settings given as flags: flag > environment > settings.json > default, the
messages a refused flag gets, and how the command line reaches other processes."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from inferd.errors import ConfigurationError
from inferd.settings.command_line import (
    COMMAND_LINE_ENV,
    CommandLine,
    CommandLineError,
    option_name,
)
from inferd.settings.loader import load_server_settings

from .settings_helpers import write_server_settings

# setting -> (in settings.json, in the environment, as a flag, what the flag gives)
VALUES = {
    "http_port": (9000, "9001", "9002", 9002),
    "grpc_port": (9010, "9011", "9012", 9012),
    "metrics_port": (9020, "9021", "9022", 9022),
    "host": ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.3"),
    "parallel_workers": (2, "3", "4", 4),
    "protocol_processes": (2, "3", "5", 5),
    "log_level": ("error", "warning", "DEBUG", "debug"),
}


def flags(**values: str) -> CommandLine:
    return CommandLine(values=values)


@pytest.mark.parametrize("prefix", ["INFERD_", "MLSERVER_"])
@pytest.mark.parametrize("name", sorted(VALUES))
def test_each_flag_wins_over_the_environment_and_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, prefix: str
) -> None:
    in_file, in_env, typed, expected = VALUES[name]
    write_server_settings(tmp_path, {name: in_file})
    monkeypatch.setenv(f"{prefix}{name.upper()}", in_env)
    flagged = load_server_settings(tmp_path, command_line=flags(**{name: typed}))
    assert getattr(flagged, name) == expected
    # Without the flag the environment wins over the file, and the file over the default.
    from_env = load_server_settings(tmp_path, command_line=flags())
    assert str(getattr(from_env, name)) == in_env
    monkeypatch.delenv(f"{prefix}{name.upper()}")
    assert getattr(load_server_settings(tmp_path), name) == in_file
    (tmp_path / "settings.json").unlink()
    default = load_server_settings(tmp_path)
    assert name not in default.model_fields_set


def test_a_flag_counts_as_set_as_in_the_file(tmp_path: Path) -> None:
    """Placement tells a parallel_workers the user chose from its default."""
    settings = load_server_settings(tmp_path, command_line=flags(parallel_workers="1"))
    assert "parallel_workers" in settings.model_fields_set
    assert "parallel_workers" not in load_server_settings(tmp_path).model_fields_set


def test_cpu_count_is_accepted_as_a_flag(tmp_path: Path) -> None:
    given = flags(parallel_workers="cpu_count", protocol_processes="cpu_count")
    settings = load_server_settings(tmp_path, command_line=given)
    assert settings.parallel_workers == settings.protocol_processes >= 1


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("http_port", "eighty", "Input should be a valid integer"),
        ("metrics_port", "70000", "Input should be less than or equal to 65535"),
        ("protocol_processes", "0", "Input should be greater than or equal to 1"),
        ("parallel_workers", "-2", "must be 0"),
        ("log_level", "loud", "Input should be 'debug', 'info', 'warning', 'error' or 'critical'"),
    ],
)
def test_a_refused_flag_is_a_command_line_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(f"INFERD_{name.upper()}", "1")  # the flag's value is the one refused
    with pytest.raises(CommandLineError) as raised:
        load_server_settings(tmp_path, command_line=flags(**{name: value}))
    message = str(raised.value)
    assert message.startswith("command line: invalid settings:")
    assert f"{name}: {expected}" in message
    assert f"(got {value!r} from option {option_name(name)})" in message


def test_a_file_at_fault_is_not_a_command_line_error(tmp_path: Path) -> None:
    write_server_settings(tmp_path, {"grpc_port": "x"})
    with pytest.raises(ConfigurationError) as raised:
        load_server_settings(tmp_path, command_line=flags(http_port="9000"))
    assert not isinstance(raised.value, CommandLineError)
    assert str(raised.value).startswith(str(tmp_path / "settings.json"))
    # Both at fault: a usage error, and the file is named.
    with pytest.raises(CommandLineError) as both:
        load_server_settings(tmp_path, command_line=flags(http_port="x"))
    assert str(both.value).startswith(str(tmp_path / "settings.json"))
    assert "from option --http-port" in str(both.value)


def test_a_settings_file_elsewhere(tmp_path: Path) -> None:
    """--settings FILE: read instead of FOLDER/settings.json; its relative paths
    start from its own folder; the folder is still the root by default."""
    repository = tmp_path / "models"
    repository.mkdir()
    write_server_settings(repository, {"http_port": 1111})
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    file = elsewhere / "server.json"
    file.write_text(json.dumps({"http_port": 2222}))
    settings = load_server_settings(repository, command_line=CommandLine(settings_file=file))
    assert (settings.http_port, settings.model_repository_root) == (2222, str(repository))
    file.write_text(json.dumps({"model_repository_root": "served"}))
    settings = load_server_settings(repository, command_line=CommandLine(settings_file=file))
    assert settings.model_repository_root == str(elsewhere / "served")


def test_the_command_line_travels_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(COMMAND_LINE_ENV, "")  # so that the variable is removed afterwards
    assert CommandLine.from_environment() == CommandLine()
    given = CommandLine(tmp_path / "s.json", {"http_port": "9000", "log_level": "debug"})
    given.export()
    assert json.loads(os.environ[COMMAND_LINE_ENV])["values"]["http_port"] == "9000"
    assert CommandLine.from_environment() == given
    monkeypatch.setenv(COMMAND_LINE_ENV, "[1]")
    with pytest.raises(ConfigurationError, match=COMMAND_LINE_ENV):
        CommandLine.from_environment()


def test_the_log_level(tmp_path: Path) -> None:
    assert load_server_settings(tmp_path).logging_level == logging.INFO
    write_server_settings(tmp_path, {"debug": True})
    debug = load_server_settings(tmp_path)
    assert (debug.logging_level, debug.access_log_enabled) == (logging.DEBUG, True)
    quiet = load_server_settings(tmp_path, command_line=flags(log_level="Warning"))
    assert (quiet.log_level, quiet.logging_level) == ("warning", logging.WARNING)
    assert quiet.access_log_enabled is False
    (tmp_path / "settings.json").unlink()
    loud = load_server_settings(tmp_path, command_line=flags(log_level="debug"))
    assert loud.access_log_enabled is True
