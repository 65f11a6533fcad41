"""supervisor/process_memory.py: the memory gauges of the server's processes."""

from __future__ import annotations

import os
import sys

import pytest

from inferd.supervisor import exposition
from inferd.supervisor.process_memory import PSS, USS, memory_families, memory_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_process_memory_is_read_from_proc() -> None:
    memory = memory_of(os.getpid())
    assert memory is not None
    pss, uss = memory
    assert 0 < uss <= pss  # its private pages are part of its proportional share


def test_each_process_is_a_sample_labelled_with_its_role_and_a_gone_one_is_left_out() -> None:
    gone = 2**22 + 1  # above the default pid_max: no such process
    families = memory_families([("supervisor", os.getpid()), ("protocol_process", gone)])
    text = exposition.write(families, openmetrics=False)
    assert f'{PSS}{{role="supervisor",pid="{os.getpid()}"}}' in text
    assert f'{USS}{{role="supervisor",pid="{os.getpid()}"}}' in text
    assert f'pid="{gone}"' not in text
    assert f"# TYPE {PSS} gauge" in text
