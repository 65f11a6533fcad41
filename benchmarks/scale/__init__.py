"""``python -m benchmarks scale``: one inferd server against K independent ones.

How far does one ``inferd start`` get on a machine's cores, against the
shared-nothing ceiling: K independent inferd servers (each its own processes
and ports, ``parallel_workers`` 0 or 1) on the same cores? For each layout (one
server at each ``--workers`` value, then each ``--replicas`` K[xP]) it starts the
servers pinned to ``--server-cores``, checks every server's answer for each
model (a light iris LogisticRegression, a heavy ~10 ms RandomForest; on demand
``mlp``, issue 27's GPU MLP stood in for on CPUs) over each protocol (REST with
wrk, gRPC with h2load), then drives one load generator per server, pinned to
``--load-cores``, for a warm-up and a measured window in which every answer is
checked and the CPU of every server's process tree is read from /proc. It prints
a markdown table per model and protocol (req/s, share of the ceiling, p99, cores
busy, the busiest process's share of one core) and writes every window to
``--json-out``.

Each replica runs one protocol process (told through the environment, so a tree
without the setting still starts); the one-server layouts run the server's
default, or each ``--protocol-processes`` value. ``--server-setting KEY=VALUE``
adds a settings.json entry to the one-server layouts, so a new server design is
measured against the K-replica ceiling in the same run.

Exit status: 0 ok, 1 a layout did not complete, 2 errors under load.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..servers import use_inferd_source
from .options import NAME, ScaleOptions, parse
from .run import run

__all__ = ["NAME", "ScaleOptions", "main", "parse", "run"]


def main(argv: Sequence[str]) -> int:
    options = parse(argv)
    use_inferd_source(options.inferd_src)
    return run(options)
