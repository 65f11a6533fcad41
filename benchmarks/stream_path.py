"""inferd's own cost per streamed response, without a transport.

The count model (repository.py) streams through the in-process pool, read three
ways: the model's generator alone, ``DataPlane.infer_stream``, and the gRPC
servicer's ``ModelStreamInfer`` (answers built as protobuf messages, not sent). The
differences are what inferd's layers cost per response; what a real server spends
beyond that is its transport's (compare with ``streaming --reference``).

    python -m benchmarks stream-path [--responses 1000] [--calls 100] [--rounds 3]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.options import add_json_out, command_parser
from benchmarks.results import write_command_record
from inferd.observability.stats import ModelStatsTable
from inferd.protocol import pb
from inferd.server.grpc.edge import GrpcEdge
from inferd.server.grpc.health import ShutdownSignal
from inferd.server.grpc.servicer import InferenceServicer
from inferd.serving.dataplane import DataPlane
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository
from inferd.settings import ModelSettings, ServerSettings
from inferd.types import InferenceRequest, Tensor
from inferd.workers.inprocess import InProcessPool

from .repository import write_count_model
from .scenarios.streaming import grpc_request

Count = Callable[[], Awaitable[int]]


def main(argv: Sequence[str]) -> None:
    parser = command_parser("stream-path", __doc__)
    parser.add_argument("--responses", type=int, default=1000, help="responses per call")
    parser.add_argument("--calls", type=int, default=100, help="calls per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    add_json_out(parser)
    args = parser.parse_args(argv)
    runs = asyncio.run(measure(args.responses, args.calls, args.rounds))
    write_command_record(args.json_out, "stream-path", args, runs)


async def measure(responses: int, calls: int, rounds: int) -> list[dict[str, Any]]:
    """us per response of each path, a row per path and round (and a line per round)."""
    with tempfile.TemporaryDirectory(prefix="inferd-stream-path-") as folder:
        repo = Path(folder)
        model_folder = write_count_model(repo, "count.CountInferd")
        sys.path.insert(0, str(model_folder))
        settings = ModelSettings.model_validate(
            {"name": "count", "implementation": "count.CountInferd"}
        )
        pool = InProcessPool()
        registry = Registry(pool, ModelStatsTable(observe=True))
        dataplane = DataPlane(ServerSettings(), registry, ModelRepository(repo))
        await registry.load("count", [settings])
        servicer = InferenceServicer(GrpcEdge(dataplane, 1 << 30), ShutdownSignal())
        paths = {
            "model alone": _model_alone(responses),
            "DataPlane.infer_stream": _dataplane(dataplane, responses),
            "gRPC ModelStreamInfer": _servicer(servicer, responses),
        }
        rows: list[dict[str, Any]] = []
        for round_ in range(rounds):
            cells = []
            for name, run in paths.items():
                started, counted = time.perf_counter(), 0
                for _ in range(calls):
                    counted += await run()
                per_response = (time.perf_counter() - started) / counted * 1e6
                cells.append(f"{name} {per_response:6.2f}")
                rows.append({"label": name, "round": round_, "us_per_response": per_response})
            print(f"round {round_}: us/response: " + "  ".join(cells))
        await registry.close()
        await pool.close()
    return rows


def _request(responses: int) -> InferenceRequest:
    return InferenceRequest([Tensor("n", np.array([responses], np.int32))])


def _model_alone(responses: int) -> Count:
    import count  # the model's module, written by write_count_model, on sys.path

    model = count.CountInferd(ModelSettings(name="count"))

    async def run() -> int:
        return sum([1 async for _ in model.predict_stream(_request(responses))])

    return run


def _dataplane(dataplane: DataPlane, responses: int) -> Count:
    async def run() -> int:
        stream = dataplane.infer_stream("count", None, _request(responses))
        return sum([len(ready) async for ready in stream])

    return run


def _servicer(servicer: InferenceServicer, responses: int) -> Count:
    body = grpc_request(responses)

    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        yield pb.ModelInferRequest.FromString(body)

    async def run() -> int:
        return sum([1 async for _ in servicer.ModelStreamInfer(requests(), None)])

    return run
