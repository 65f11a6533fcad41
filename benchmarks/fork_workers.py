"""Workers forked from one loaded model (``fork_workers``) against workers that each load it.

For each mode (``fork_workers`` off, then on) and each worker count, a server
serving one model is started, one after another, and measured: seconds from
``inferd start`` to READY (warm-up included) and the PSS of its whole process tree
(``/proc/<pid>/smaps_rollup``). Then, all of them up, the client-side latency of
sequential requests sent to each server in turn (median and p99; interleaved, so
that the machine's other work falls on all alike), and, with one worker, the
seconds from SIGKILLing the worker to an answer from its replacement.

    python -m benchmarks.fork_workers [--model heavy|forest] [--workers 1 4] [--requests 200]

``heavy`` is tests/e2e/runtimes/testmodels.py's HeavyWeights (128 MiB of float64
weights; a request reads all of them), ``forest`` a scikit-learn RandomForest of
about 25 MB as joblib. tests/e2e/test_fork_workers.py checks the same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common.polling import wait_for
from benchmarks.common.procstat import tree_pss_mib
from benchmarks.common.serverproc import ServerProcess, start_server
from tests.e2e.test_fork_workers import (
    FOREST_FEATURES,
    HEAVY_WIDTH,
    _forest_repository,
    _heavy_repository,
)

WIDTHS = {"heavy": HEAVY_WIDTH, "forest": FOREST_FEATURES}


def _body(model: str) -> dict[str, Any]:
    width = WIDTHS[model]
    return {"inputs": [{"name": "x", "datatype": "FP64", "shape": [1, width],
                        "data": [0.5] * width}]}  # fmt: skip


def _interleaved_latencies_ms(
    clients: list[httpx.Client], model: str, requests: int
) -> list[list[float]]:
    """Sequential requests to each server in turn (A, B, A, B, ...), so that what else
    the machine does falls on all of them alike; each server's latencies."""
    body = json.dumps(_body(model)).encode()
    headers = {"content-type": "application/json"}
    timings: list[list[float]] = [[] for _ in clients]
    for number in range(requests + 10):  # the first 10 warm the path up
        for client, taken in zip(clients, timings, strict=True):
            begun = time.perf_counter()
            response = client.post(f"/v2/models/{model}/infer", content=body, headers=headers)
            response.raise_for_status()
            if number >= 10:
                taken.append((time.perf_counter() - begun) * 1000)
    return timings


def _answering_pid(client: httpx.Client, model: str) -> int | None:
    try:
        response = client.post(f"/v2/models/{model}/infer", json=_body(model))
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    outputs = {output["name"]: output["data"] for output in response.json()["outputs"]}
    return int(outputs["pid"][0]) if "pid" in outputs else -1


def _restart_seconds(server: ServerProcess, client: httpx.Client) -> float | None:
    """SIGKILL the worker that answers, then time until its replacement answers."""
    killed = _answering_pid(client, "heavy")
    if killed is None or killed < 0:
        return None
    begun = time.monotonic()
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: _answering_pid(client, "heavy") not in (None, killed), server.log, 30, 0.005)
    return time.monotonic() - begun


def start(repository: Path, workers: int, fork: bool) -> tuple[ServerProcess, dict[str, Any]]:
    """A server, and its row: ready time and tree PSS (measured alone on the machine)."""
    begun = time.monotonic()
    settings = {"parallel_workers": workers, "fork_workers": fork}
    server = start_server(repository, settings, log_dir=repository)
    row: dict[str, Any] = {"fork_workers": fork, "workers": workers}
    row["ready_s"] = round(time.monotonic() - begun, 2)
    row["tree_pss_mib"] = round(tree_pss_mib(server.process.pid), 1)
    return server, row


def measure(model: str, repository: Path, counts: list[int], requests: int) -> list[dict[str, Any]]:
    servers: list[ServerProcess] = []
    rows: list[dict[str, Any]] = []
    try:
        for fork in (False, True):
            for workers in counts:
                server, row = start(repository, workers, fork)
                servers.append(server)
                rows.append(row)
        clients = [httpx.Client(base_url=server.url, timeout=30) for server in servers]
        for row, timings in zip(
            rows, _interleaved_latencies_ms(clients, model, requests), strict=True
        ):
            row["p50_ms"] = round(statistics.median(timings), 2)
            row["p99_ms"] = round(statistics.quantiles(timings, n=100)[98], 2)
        for row, server, client in zip(rows, servers, clients, strict=True):
            if row["workers"] == 1 and model == "heavy":
                restart = _restart_seconds(server, client)
                row["restart_s"] = None if restart is None else round(restart, 3)
            client.close()
        return rows
    finally:
        for server in servers:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(WIDTHS), default="heavy")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--requests", type=int, default=200)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fork-workers-") as folder:
        root = Path(folder)
        if options.model == "heavy":
            repository = _heavy_repository(root, load_seconds=0)
        else:
            repository = _forest_repository(root)
        rows = measure(options.model, repository, options.workers, options.requests)
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
