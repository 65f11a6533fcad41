"""The supervisor reaps the orphans it adopts, never a child someone else waits for."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# In a process of its own: reaping is process-wide, and pytest's children are not ours.
SCRIPT = textwrap.dedent(
    """
    import os, time
    from inferd.supervisor.strays import reap_strays

    stray = os.fork()
    if stray == 0:
        os._exit(3)
    own = os.fork()
    if own == 0:
        time.sleep(0.5)
        os._exit(4)
    time.sleep(0.2)  # the stray has exited: a zombie
    assert reap_strays(lambda: {own}) == 1
    try:
        os.waitpid(stray, os.WNOHANG)
        raise AssertionError("the stray was not reaped")
    except ChildProcessError:
        pass
    _, status = os.waitpid(own, 0)  # still its owner's to wait for
    assert os.waitstatus_to_exitcode(status) == 4
    assert reap_strays(lambda: set()) == 0  # no child left
    print("ok")
    """
)


def test_strays_are_reaped_and_own_children_left_to_their_waiters() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
