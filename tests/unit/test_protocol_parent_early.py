"""supervisor/protocol_forks.py fork_parent_early: the parent is forked from the
supervisor only when nothing makes the fork unsafe; else it is started afresh later."""

from __future__ import annotations

import logging
import re
import threading

import pytest

from inferd.supervisor.protocol_forks import fork_parent_early


def test_a_running_thread_leaves_the_parent_to_be_started_afresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="busy", daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.INFO, "inferd.supervisor.protocol_forks"):
            assert fork_parent_early("/nonexistent") is None
    finally:
        release.set()
        thread.join()
    # Other tests of the same run may leave threads of their own: the message names them all.
    said = caplog.text.partition("started afresh: threads are running (")[2]
    assert re.search(r"[(,] ?busy[,)]", f"({said}"), caplog.text
