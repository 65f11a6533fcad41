"""What a cold request costs with ``load_on_request``: the iris model's first request
after it was unloaded (the load, then the answer) against a warm request.

Starts a server (``load_on_request: true``) on a repository holding the iris model,
then ``--rounds`` times: unloads it through the repository API, times the next
request (cold), then times ``--warm`` requests more (warm). Prints p50 and p99 of
each in milliseconds, client-side over REST.

    python -m benchmarks.cold_request [--rounds 30] [--warm 20] [--protocol-processes 1]
        [--parallel-workers 0]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.support.models import add_sklearn_model
from tests.support.serverproc import start_server

BODY = {
    "inputs": [{"name": "x", "datatype": "FP64", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]
}


def timed(client: httpx.Client) -> float:
    started = time.perf_counter()
    response = client.post("/v2/models/iris/infer", json=BODY)
    took = time.perf_counter() - started
    response.raise_for_status()
    return took * 1000


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--protocol-processes", type=int, default=1)
    parser.add_argument("--parallel-workers", type=int, default=0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder)
        add_sklearn_model(repository)
        settings = {
            "load_on_request": True,
            "protocol_processes": options.protocol_processes,
            "parallel_workers": options.parallel_workers,
            "metrics_endpoint": None,
        }
        cold: list[float] = []
        warm: list[float] = []
        server = start_server(repository, settings)
        with server, httpx.Client(base_url=server.url, timeout=120) as client:
            timed(client)  # the first load of all imports the runtime's modules
            for _ in range(options.rounds):
                client.post("/v2/repository/models/iris/unload").raise_for_status()
                cold.append(timed(client))
                warm.extend(timed(client) for _ in range(options.warm))
    for what, values in (("cold", cold), ("warm", warm)):
        print(
            f"{what}: p50 {statistics.median(values):.1f} ms, "
            f"p99 {percentile(values, 0.99):.1f} ms ({len(values)} requests)"
        )


if __name__ == "__main__":
    main()
