"""Which of the server's processes the kernel's out-of-memory killer takes first.

The OOM killer picks by resident size, and a fork parent holding every model, or
the supervisor, is as likely a pick as a worker. What a death costs is not alike
(docs/design.md "What each process's death costs"): a forked protocol process or
worker is forked again in about 0.1 s and loses only its requests in flight; a
spawned one loses the same but is restarted with a load; the model host's death
costs every hosted model a load; a fork parent's death frees no memory (its
children keep the shared pages), and its replacement loads another copy; the
supervisor's or a lone server's death is the server's. So each process raises its
``oom_score_adj`` by what it is (:data:`ROLE_OFFSETS`), above the score
``inferd start`` had (set by whoever started it: systemd's ``OOMScoreAdjust``,
Kubernetes' QoS class), carried to every process in :data:`BASE_ENV`. An
unprivileged process may raise its score, and lower it down to that base again
(the kernel's ``oom_score_adj_min``), so a fork parent spawned by a protocol
process sets the parent's score back. Linux only; elsewhere, and where the file
cannot be written, nothing happens.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

BASE_ENV = "INFERD_OOM_SCORE_BASE"
OWN_SCORE = Path("/proc/self/oom_score_adj")
MOST = 1000  # the kernel's bound: always killed first

# Cheapest to replace first: forked again from a loaded parent, in about 0.1 s.
FORKED = "forked"
# Restarted by loading its models again; dies alone (its requests in flight).
SPAWNED = "spawned"
# Every hosted model loads again when it dies (its clients wait meanwhile).
MODEL_HOST = "model host"
# Killing it frees no model pages (its children hold them) and its replacement loads
# another copy; the supervisor and a lone server are the server: left at the base.
PARENT = "parent"
ROLE_OFFSETS = {FORKED: 600, SPAWNED: 400, MODEL_HOST: 200, PARENT: 0}


def mark_base() -> None:
    """In ``inferd start``: the score every process of the server adds its role's to."""
    if BASE_ENV not in os.environ:
        os.environ[BASE_ENV] = str(_read() or 0)


def take_role(role: str) -> None:
    """Set this process's score for ``role`` (one of :data:`ROLE_OFFSETS`)."""
    base = int(os.environ.get(BASE_ENV, "0"))
    with contextlib.suppress(OSError, ValueError):
        OWN_SCORE.write_text(str(min(MOST, base + ROLE_OFFSETS[role])))


def _read() -> int | None:
    try:
        return int(OWN_SCORE.read_text())
    except (OSError, ValueError):
        return None
