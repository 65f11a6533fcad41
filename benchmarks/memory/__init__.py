"""``python -m benchmarks memory``: the memory and start-up of a server's workers.

What does each added worker cost, and how long until the model is READY, against
``parallel_workers`` (issue 26)? A RandomForest (60 trees grown on 40,000 rows,
about 21 MiB as joblib) is trained here once; for each ``--workers`` value and
each server (inferd, and MLServer 1.7.1 when its Python is known), one server at
a time starts on a fresh repository serving it under
``mlserver_sklearn.SKLearnModel`` (``--inferd-runtime`` adds inferd under its own
``inferd.runtimes.sklearn.SKLearnModel``, ``--fork-workers`` adds inferd with
``fork_workers`` on). It measures the time from the
server's start to ``/v2/models/forest/ready`` answering 200, reads the PSS of the
server's whole process tree, has every worker's share of requests answered (each
answer checked: status 200, the row's class), and reads the PSS again: the
figure reported, since serving touches pages a fork would otherwise share.

With ``--protocol-processes`` the axis is inferd's protocol processes, and
``--loads api poll request`` adds inferd loading the model after its start (its
folder put into the repository once the server is ready): through the repository
API, found by ``repository_poll_secs``, or by a first request (``load_on_request``),
each against the load at start (issue #43: one copy however a model is loaded);
their "ready s" is the load's own time, and the first request after it is printed.

It prints a markdown table (PSS and processes, MiB per added worker, time to
READY and its ratio to the fewest workers) and writes every run, with each
process's Rss, Pss and private memory, to ``--json-out``.

Exit status: 0 ok, 1 a run did not complete (a server did not become ready or
answered wrongly).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..servers import use_inferd_source
from .options import NAME, MemoryOptions, parse
from .run import run

__all__ = ["NAME", "MemoryOptions", "main", "parse", "run"]


def main(argv: Sequence[str]) -> int:
    options = parse(argv)
    use_inferd_source(options.inferd_src)
    return run(options)
