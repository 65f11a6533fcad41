"""``fork_workers`` with several models: the cost that keeps it off by default.

Without ``fork_workers`` the server's ``parallel_workers`` processes each load
every model; with it, each CPU model gets a fork parent and ``parallel_workers``
forked workers of its own. One big model gains (its pages are shared), but a
repository of many small models pays an interpreter per model instead of one per
worker. For each worker count and mode, one after another, a server serving
``--models`` small scikit-learn models (the tests' iris model) is started and
measured: seconds from ``inferd start`` to ready, the PSS of its whole process
tree and how many processes that tree has.

    python -m benchmarks.fork_models [--models 8] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.models import add_sklearn_model
from benchmarks.common.procstat import descendants, tree_pss_mib
from benchmarks.common.serverproc import start_server


@dataclass(frozen=True)
class Run:
    models: int
    workers: int
    fork: bool
    ready_s: float
    pss_mib: float
    processes: int

    def row(self) -> str:
        mode = "on" if self.fork else "off"
        return (
            f"| {self.models} | {self.workers} | {mode} | {self.ready_s:.1f} "
            f"| {self.pss_mib:.0f} | {self.processes} |"
        )


def measure(models: int, workers: int, fork: bool) -> Run:
    """Start a server with ``models`` iris models and read its cost once it is ready
    (``/v2/health/ready``: every model loaded)."""
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder)
        for number in range(models):
            add_sklearn_model(repository, f"iris{number}")
        started = time.monotonic()
        settings = {"parallel_workers": workers, "fork_workers": fork}
        with start_server(repository, settings) as server:
            ready_s = time.monotonic() - started
            pid = server.process.pid
            return Run(models, workers, fork, ready_s, tree_pss_mib(pid), 1 + len(descendants(pid)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    print("| models | parallel_workers | fork_workers | ready s | PSS MiB | processes |")
    print("|---:|---:|---|---:|---:|---:|")
    for workers in args.workers:
        for fork in (False, True):
            print(measure(args.models, workers, fork).row(), flush=True)


if __name__ == "__main__":
    main()
