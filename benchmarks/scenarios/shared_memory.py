"""Large tensors: system shared memory vs binary HTTP vs raw gRPC, in one run."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common.models import write_model_folder
from benchmarks.common.serverproc import ServerProcess

from ..loadgen import Load, Target
from ..servers import BASELINE_SUFFIX, INFERD, Contender, baseline_pairs, with_baseline
from ..tensorload import MODEL, SHM, TRANSPORTS, TensorLoad, TensorTarget, check_once
from .base import Case, Scenario, VerificationError

TOTAL_MODULE = '''\
"""Answers the sum of its FP32 input ``x``: it reads every byte, as a real model would."""

import numpy as np

from inferd import InferenceResponse, Model, Tensor


class Total(Model):
    def predict(self, request):
        x = request.inputs[0].data
        return InferenceResponse(outputs=[Tensor("total", np.array([x.sum(dtype=np.float64)]))])
'''


class SharedMemory(Scenario):
    name = "shm"
    description = """Large FP32 inputs three ways, inferd only: system shared memory,
binary HTTP and raw gRPC, through tritonclient as a Triton user sends them.

Each case sends one --sizes-mib tensor per request to a model that sums it (one
FP64 answer). shm: the client writes the tensor into its registered region each
request (a memcpy; the data changes between requests) and sends the reference;
the server (its worker, with parallel_workers > 0) reads it in place.
http-binary: the binary tensor extension. grpc-raw: raw_input_contents. The three
contenders are the same server settings (shared_memory_enabled) taking turns."""
    defaults = {"duration": 5.0, "warmup": 1.0, "rounds": 2, "connections": [1]}
    compares_mlserver = False
    load_tool = "tritonclient"
    model = MODEL
    settings = {"shared_memory_enabled": True, "max_request_size": 256 * 1024 * 1024}

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--sizes-mib", type=int, nargs="+", default=[4, 64], help="input sizes, MiB"
        )

    def contenders(self) -> list[Contender]:
        return [Contender(transport, INFERD) for transport in TRANSPORTS]

    def cases(self) -> list[Case]:
        contenders = tuple(with_baseline(self.contenders(), self.options.baseline_src))
        return [
            Case(f"{mib}MiB c{n}", contenders, self.tensor_load(mib, n), MODEL)
            for mib in self.options.args.sizes_mib
            for n in self.options.connections
        ]

    def tensor_load(self, mib: int, connections: int) -> Load:
        return TensorLoad(mib, connections)

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        write_model_folder(repo, MODEL, "total.Total", files={"total.py": TOTAL_MODULE})

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        target = TensorTarget(
            server.url,
            b"",
            transport=contender.label.removesuffix(BASELINE_SUFFIX),
            http_address=f"127.0.0.1:{server.http_port}",
            grpc_address=server.grpc_address,
            server_pid=server.process.pid,
        )
        assert isinstance(case.load, TensorLoad)
        try:
            check_once(target, case.load.mib)
        except Exception as error:
            raise VerificationError(f"{contender.label}: {error}") from None
        return target

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        pairs = [(SHM, other) for other in TRANSPORTS[1:] if {SHM, other} <= set(labels)]
        return pairs + baseline_pairs(labels)

    def describe(self) -> str:
        return f"{super().describe()}, inputs of {self.options.args.sizes_mib} MiB FP32"
