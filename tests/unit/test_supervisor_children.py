"""The supervisor's restarts and what it tells a protocol process (supervisor/)."""

from __future__ import annotations

import signal
from pathlib import Path

from inferd.settings import ServerSettings
from inferd.supervisor.child import protocol_server, protocol_settings
from inferd.supervisor.children import Backoff, describe_exit, environment_of_children
from inferd.supervisor.paths import PrivatePaths, ProtocolRole, protocol_role


def test_the_pause_doubles_while_a_process_keeps_dying_soon() -> None:
    backoff = Backoff()
    pauses = [backoff.pause_after(uptime=1.0) for _ in range(7)]
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_a_minute_up_brings_the_first_pause_back() -> None:
    backoff = Backoff()
    for _ in range(4):
        backoff.pause_after(uptime=0.1)
    assert backoff.pause_after(uptime=60.0) == 0.5
    assert backoff.pause_after(uptime=0.1) == 1.0


def test_an_exit_says_its_code_or_its_signal() -> None:
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-signal.SIGKILL) == "signal SIGKILL"
    assert describe_exit(-200) == "signal 200"


def test_a_child_is_told_the_private_folder_and_reads_its_role(tmp_path: Path) -> None:
    paths = PrivatePaths(tmp_path)
    environment = environment_of_children(paths)
    role = protocol_role({**environment, "INFERD_PROTOCOL_INDEX": "3"})
    assert role == ProtocolRole(paths, 3)
    assert protocol_role({}) is None


def test_a_protocol_process_runs_its_models_in_process(tmp_path: Path) -> None:
    settings = ServerSettings(model_repository_root=str(tmp_path), parallel_workers=4)
    assert protocol_settings(settings).parallel_workers == 0
    server = protocol_server(settings, ProtocolRole(PrivatePaths(tmp_path), 1))
    assert server.settings.parallel_workers == 0
    assert server.role is not None
    assert server.role.rest_socket == tmp_path / "rest-1.sock"
    assert server.role.metrics_socket == tmp_path / "metrics-1.sock"
