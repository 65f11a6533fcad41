"""Children forked through a middle process: adopted by the subreaper that asked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from inferd.workers.adoption import AdoptedChild

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

# A subreaper forks a fork parent; the parent forks a child through fork_adopted and
# dies; the child must live on as the subreaper's child, and be reaped there.
SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal, sys, time
    from inferd.workers.adoption import AdoptedChild, become_subreaper, fork_adopted

    assert become_subreaper()
    me = os.getpid()
    read, write = os.pipe()
    parent = os.fork()
    if parent == 0:
        pid = fork_adopted(me)
        if pid == 0:  # the adopted child: waits to be killed
            time.sleep(60)
            os._exit(0)
        os.write(write, str(pid).encode())
        os._exit(0)  # the parent dies: its child must not
    os.waitpid(parent, 0)
    child = AdoptedChild(int(os.read(read, 64)))
    assert os.getpid() == me
    ppid = int(open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[1])
    assert ppid == me, (ppid, me)
    assert child.poll() is None
    child.send_signal(signal.SIGTERM)
    print(asyncio.run(asyncio.wait_for(child.wait(), 10)))
    """
)


def test_a_child_forked_through_a_middle_process_outlives_its_parent_and_is_reaped() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(-signal.SIGTERM)


def test_a_child_not_ours_reads_as_exited_with_an_unknown_status() -> None:
    assert AdoptedChild(os.getpid()).poll() == 255  # no child of its own: no status
