"""What ``load_on_request`` costs: a cold request, and random access under a budget.

``cold`` (the default): starts a server (``load_on_request: true``) on a repository
holding one model, then ``--rounds`` times unloads it through the repository
API, times the next request (cold: the load, then the answer), then ``--warm``
requests more (warm). Prints p50 and p99 of each in milliseconds, client-side
over REST. The model (``--model``): ``iris`` (scikit-learn, a 2 KB joblib file), or
``big``: benchmarks/runtimes/bigmodel.py, whose load reads ``--megabytes`` (100)
of float32 weights from a .npy file the benchmark writes (read from the page
cache after the first load: what is measured is the server's load, not the disk).

``--random N``: N copies of the iris model, ``--clients`` clients each asking a
model drawn at random for ``--seconds``, once per ``--budgets`` value of
``max_loaded_models`` (a server each): requests per second, p50 / p99, and the
share of requests that loaded their model (``model_loads_total``).

    python -m benchmarks load-on-request [--model iris|big] [--megabytes 100]
        [--rounds 30] [--warm 20] [--protocol-processes 1] [--parallel-workers 0]
    python -m benchmarks load-on-request --random 50 --budgets 5 25 50 [--seconds 10]
        [--clients 4]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.common.models import add_sklearn_model, write_model_folder
from benchmarks.common.serverproc import start_server
from benchmarks.options import add_json_out, command_parser
from benchmarks.results import write_command_record

BIG_RUNTIME = Path(__file__).resolve().parent / "runtimes" / "bigmodel.py"
BODY = {
    "inputs": [{"name": "x", "datatype": "FP64", "shape": [1, 4], "data": [5.1, 3.5, 1.4, 0.2]}]
}


def timed(client: httpx.Client, name: str = "iris") -> float:
    started = time.perf_counter()
    response = client.post(f"/v2/models/{name}/infer", json=BODY)
    took = time.perf_counter() - started
    response.raise_for_status()
    return took * 1000


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def figures(values: list[float]) -> dict[str, float]:
    """Requests, p50 and p99 (ms) of a list of request times, for --json-out."""
    p50, p99 = statistics.median(values), percentile(values, 0.99)
    return {"requests": len(values), "p50_ms": p50, "p99_ms": p99}


def summary(values: list[float]) -> str:
    row = figures(values)
    return f"p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms"


def settings_of(options: argparse.Namespace, **more: Any) -> dict[str, Any]:
    return {
        "load_on_request": True,
        "protocol_processes": options.protocol_processes,
        "parallel_workers": options.parallel_workers,
        **more,
    }


def add_big_model(repository: Path, megabytes: int) -> str:
    """The ``big`` model: float32 weights of ``megabytes`` MiB (rows of 4, as the
    iris input) in weights.npy, served by benchmarks/runtimes/bigmodel.py."""
    weights = np.random.default_rng(0).random((megabytes * (1 << 20) // 16, 4), np.float32)
    folder = write_model_folder(
        repository,
        "big",
        "bigmodel.BigModel",
        files={BIG_RUNTIME.name: BIG_RUNTIME},
        parameters={"uri": "./weights.npy"},
    )
    np.save(folder / "weights.npy", weights)
    return "big"


def cold(options: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder)
        if options.model == "big":
            name = add_big_model(repository, options.megabytes)
        else:
            name = add_sklearn_model(repository).name
        cold: list[float] = []
        warm: list[float] = []
        server = start_server(repository, settings_of(options, metrics_endpoint=None))
        with server, httpx.Client(base_url=server.url, timeout=120) as client:
            timed(client, name)  # the first load of all imports the runtime's modules
            for _ in range(options.rounds):
                client.post(f"/v2/repository/models/{name}/unload").raise_for_status()
                cold.append(timed(client, name))
                warm.extend(timed(client, name) for _ in range(options.warm))
    print(f"model {options.model}")
    print(f"cold: {summary(cold)} ({len(cold)} requests)")
    print(f"warm: {summary(warm)} ({len(warm)} requests)")
    return [{"label": "cold", **figures(cold)}, {"label": "warm", **figures(warm)}]


def random_access(options: argparse.Namespace) -> list[dict[str, Any]]:
    names = [f"iris-{index}" for index in range(options.random)]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder)
        for name in names:
            add_sklearn_model(repository, name)
        for budget in options.budgets:
            settings = settings_of(options, max_loaded_models=budget)
            with start_server(repository, settings) as server:
                with httpx.Client(base_url=server.url, timeout=120) as client:
                    timed(client, names[0])  # imports the runtime's modules everywhere
                times = run_clients(server.url, names, options)
                metrics = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
            loaded = sum(
                float(n) for n in re.findall(r"^model_loads_total\{.*\} (\S+)$", metrics, re.M)
            )
            loaded = loaded / options.protocol_processes - 1  # each process counts; not the first
            rate = len(times) / options.seconds
            print(
                f"{options.random} models, max_loaded_models {budget}: {rate:.0f} req/s, "
                f"{summary(times)}, {loaded / max(len(times), 1):.0%} loaded their model"
            )
            row = {"label": f"max_loaded_models {budget}", "requests_per_s": rate}
            rows.append(row | figures(times) | {"loads": loaded})
    return rows


def run_clients(url: str, names: list[str], options: argparse.Namespace) -> list[float]:
    times: list[float] = []
    stop = time.monotonic() + options.seconds

    def client(seed: int) -> None:
        chance = random.Random(seed)
        with httpx.Client(base_url=url, timeout=120) as http:
            while time.monotonic() < stop:
                times.append(timed(http, chance.choice(names)))

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(options.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def main(argv: Sequence[str]) -> None:
    parser = command_parser("load-on-request", __doc__)
    parser.add_argument("--model", choices=["iris", "big"], default="iris")
    parser.add_argument("--megabytes", type=int, default=100, help="the big model's weights")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--protocol-processes", type=int, default=1)
    parser.add_argument("--parallel-workers", type=int, default=0)
    parser.add_argument("--random", type=int, default=0, help="models to access at random")
    parser.add_argument("--budgets", type=int, nargs="+", default=[5, 25, 50])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    add_json_out(parser)
    options = parser.parse_args(argv)
    rows = random_access(options) if options.random else cold(options)
    write_command_record(options.json_out, "load-on-request", options, rows)
