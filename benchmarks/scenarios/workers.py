"""Inference in worker processes: 1 and 2 workers, inferd vs MLServer, and the IPC trip."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.serverproc import ServerProcess

from ..loadgen import Target
from ..repository import ROW, busy_module, v2_request, write_busy_model
from ..servers import INFERD, Contender, baseline_pairs, with_baseline
from .base import Case, VerificationError, first_output
from .rest import Rest

MODELS = ("busy", "iris")
BUSY_MS = 1.0
BUSY_REQUEST = v2_request([ROW], name="x")
ANCHOR = "mlserver pw=1"  # every row's ratio is against it


class Workers(Rest):
    name = "workers"
    description = """Inference in worker processes: inferd vs MLServer at 1 and 2 workers.

1. The IPC round trip: main -> worker -> main for a no-op model and one FP32
   [1, 4] tensor, timed call by call through inferd's process pool, against the
   in-process pool (and a 4 MiB tensor both ways).
2. REST throughput and latency (wrk) for each model (a CPU-bound model of about
   1 ms of pure Python per call, and the iris model), each server and each
   parallel_workers value (--workers)."""
    defaults = {"duration": 8.0, "warmup": 2.0, "rounds": 1}
    varies = frozenset({"parallel_workers"})
    settings = {"debug": False}

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--workers",
            type=int,
            nargs="+",
            default=[1, 2],
            help="parallel_workers values compared",
        )
        parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
        parser.add_argument(
            "--ipc-calls", type=int, default=5000, help="calls per IPC sample (0: skip)"
        )

    def contenders(self) -> list[Contender]:
        return [
            Contender(f"{server} pw={workers}", server, {"parallel_workers": workers})
            for server in self.options.servers
            for workers in self.options.args.workers
        ]

    def cases(self) -> list[Case]:
        contenders = tuple(with_baseline(self.contenders(), self.options.baseline_src))
        return [
            Case(f"{model} c{n}", contenders, self.load(n), model)
            for model in self.options.args.models
            for n in self.options.connections
        ]

    @cached_property
    def busy_iterations(self) -> tuple[int, float]:
        """Loop iterations that take BUSY_MS here, and the ms per call they measured."""
        return calibrate_busy(BUSY_MS)

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        if case.model == "iris":
            super().write_repository(repo, contender, case)
            return
        implementation = "busy.BusyInferd" if contender.kind == INFERD else "busy.BusyMLServer"
        write_busy_model(repo, implementation, BUSY_MS, self.busy_iterations[0])

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        if case.model == "iris":
            return super().verify(server, contender, case)
        url = f"{server.url}/v2/models/busy/infer"
        output = first_output(url, BUSY_REQUEST)
        if not np.allclose(np.asarray(output["data"], dtype=float), [2 * v for v in ROW]):
            raise VerificationError(f"POST {url}: expected 2x{ROW}, got {output}")
        return Target(url, json.dumps(BUSY_REQUEST).encode())

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        anchored = [(label, ANCHOR) for label in labels if ANCHOR in labels and label != ANCHOR]
        return anchored + baseline_pairs(labels)

    def measure_in_process(self) -> dict[str, Any]:
        iterations, busy_ms = self.busy_iterations
        figures: dict[str, Any] = {"busy_iterations": iterations, "busy_ms": busy_ms}
        if self.options.args.ipc_calls:
            figures["ipc"] = measure_ipc(self.options.args.ipc_calls)
        return figures

    def report_in_process(self, figures: Mapping[str, Any]) -> list[str]:
        lines = [
            f"CPU-bound model: {figures['busy_iterations']} loop iterations = "
            f"{figures['busy_ms']:.2f} ms per call here"
        ]
        for where, timing in figures.get("ipc", {}).items():
            lines.append(
                f"IPC round trip, {where:<14}: p50 {timing['p50_us']:6.1f} us, mean "
                f"{timing['mean_us']:6.1f} us (no-op model, one FP32 [1,4] tensor); "
                f"4 MiB tensor both ways: {timing['large_ms']:.2f} ms"
            )
        return lines


def calibrate_busy(target_ms: float) -> tuple[int, float]:
    """Loop iterations that take ``target_ms`` here, and the measured ms per call."""
    namespace: dict[str, Any] = {}
    exec(busy_module(target_ms, 100_000), namespace)
    spin = namespace["spin"]
    spin(100_000)
    started = time.perf_counter()
    spin(100_000)
    iterations = int(100_000 * target_ms / ((time.perf_counter() - started) * 1e3))
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        spin(iterations)
        timings.append((time.perf_counter() - started) * 1e3)
    return iterations, statistics.median(timings)


async def time_pool(pool: Any, calls: int, samples: int = 5) -> dict[str, float]:
    """p50 and mean of one request through ``pool``, median over ``samples``."""
    from inferd.settings.loader import model_settings_from_dict
    from inferd.types import InferenceRequest, Tensor
    from inferd.workers.base import Call

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "noop.py").write_text(
            "from inferd import InferenceResponse, Model\n"
            "class NoOp(Model):\n"
            "    def predict(self, request):\n"
            "        return InferenceResponse(outputs=request.inputs)\n"
        )
        source = Path(folder) / "model-settings.json"
        settings = model_settings_from_dict({"name": "noop", "implementation": "noop.NoOp"}, source)
        await pool.start()
        await pool.load(1, settings)
    request = InferenceRequest([Tensor("x", np.array([ROW], dtype=np.float32))])
    for _ in range(min(calls, 2000)):
        await pool.predict(Call(1, request)).result()
    medians, means = [], []
    for _ in range(samples):
        timings = []
        for _ in range(calls):
            started = time.perf_counter_ns()
            await pool.predict(Call(1, request)).result()
            timings.append(time.perf_counter_ns() - started)
        medians.append(statistics.median(timings) / 1e3)
        means.append(statistics.fmean(timings) / 1e3)
    large = InferenceRequest([Tensor("x", np.zeros((1024, 1024), dtype=np.float32))])
    large_started = time.perf_counter()
    for _ in range(20):
        await pool.predict(Call(1, large)).result()
    large_ms = (time.perf_counter() - large_started) / 20 * 1e3
    await pool.unload(1)
    await pool.close()
    return {
        "p50_us": statistics.median(medians),
        "mean_us": statistics.median(means),
        "large_ms": large_ms,
    }


def measure_ipc(calls: int) -> dict[str, dict[str, float]]:
    import uvloop

    from inferd.settings import ServerSettings
    from inferd.workers.inprocess import InProcessPool
    from inferd.workers.pool import ProcessPool

    process_pool = ProcessPool(ServerSettings(parallel_workers=1))
    return {
        "worker process": uvloop.run(time_pool(process_pool, calls)),
        "in-process": uvloop.run(time_pool(InProcessPool(), calls)),
    }
