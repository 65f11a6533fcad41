"""The e2e fixture's default protocol_processes and the knob that changes it; the
process group and session a server is started in."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.serverproc import PROTOCOL_PROCESSES_ENV, default_protocol_processes, spawn


def test_one_protocol_process_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PROTOCOL_PROCESSES_ENV, raising=False)
    assert default_protocol_processes() == 1
    monkeypatch.setenv(PROTOCOL_PROCESSES_ENV, "2")
    assert default_protocol_processes() == 2


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_a_value_that_is_no_count_of_processes_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(PROTOCOL_PROCESSES_ENV, value)
    with pytest.raises(ValueError, match=PROTOCOL_PROCESSES_ENV):
        default_protocol_processes()


@pytest.mark.parametrize("own_session", [True, False])
def test_a_server_leads_its_own_process_group_in_a_session_of_its_own_or_this_one(
    tmp_path: Path, own_session: bool
) -> None:
    """The benchmarks' --shared-session keeps a server in this session (one scheduling
    group with the load generator under autogroup); stop() reaches its group either way."""
    script = "import time; time.sleep(60)"
    server = spawn(
        [sys.executable, "-c", script],
        repository=tmp_path,
        log_path=tmp_path / "server.log",
        ports=(1, 2, 3),
        own_session=own_session,
    )
    with server:
        pid = server.process.pid
        assert os.getpgid(pid) == pid  # its own group: killpg(pid) reaches its children
        assert (os.getsid(pid) == pid) is own_session
        assert (os.getsid(pid) == os.getsid(0)) is not own_session
    assert server.process.returncode is not None
