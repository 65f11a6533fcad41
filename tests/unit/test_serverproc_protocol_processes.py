"""The e2e fixture's default protocol_processes and the knob that changes it."""

from __future__ import annotations

import pytest

from tests.support.serverproc import PROTOCOL_PROCESSES_ENV, default_protocol_processes


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
