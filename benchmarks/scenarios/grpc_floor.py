"""Unary gRPC against its floor: grpcio alone, inferd (one protocol process and its
default), and a real Triton when one is installed, on the same iris model."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import joblib

from ..repository import MODEL_FILE, write_sklearn_model
from ..servers import BENCHMARKS_DIR, ENVOY_FLOOR, FLOOR, INFERD, TRITON, Contender, baseline_pairs
from .base import Case
from .grpc import INPUT_NAME, Grpc, add_load_arguments

TRITON_PYTHON_ENV = "INFERD_BENCH_TRITON_PYTHON"
INFERD_DEFAULT = "inferd default"  # inferd's own protocol_processes (the CPUs)
INFERD_ENVOY = "inferd envoy"  # inferd's gRPC service in Envoy via pyvoy (server/envoy_app.py)
# In a repository, the file that has grpc_floor_asgi.py serve inferd instead of the floor.
INFERD_MARKER = "serve-with-inferd"

# Triton's Python backend running the same estimator file: one predict per request,
# as the floor and inferd call it (no dynamic batching: neither of them batches here).
TRITON_CONFIG = """backend: "python"
max_batch_size: 0
input [ {{ name: "{input}" data_type: TYPE_FP32 dims: [ -1, 4 ] }} ]
output [ {{ name: "predict" data_type: TYPE_INT64 dims: [ -1, 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""
TRITON_MODEL = """import os

import joblib
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.estimator = joblib.load(os.path.join(folder, "{model_file}"))

    def execute(self, requests):
        answers = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "{input}").as_numpy()
            classes = np.asarray(self.estimator.predict(rows), dtype=np.int64).reshape(-1, 1)
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("predict", classes)]))
        return answers
"""


class GrpcFloor(Grpc):
    name = "grpc-floor"
    description = """Unary gRPC ModelInfer (h2load) against the floor: grpcio alone, inferd, Triton.

In one run, alternating: grpc_floor_server.py (grpcio's asyncio server parsing the
request, calling the model's predict and answering, nothing else), inferd with
one protocol process ("inferd") and with its default ("inferd default": one per
CPU), and, with --triton-python, a real Triton (the tritonserver nvidia-pytriton
bundles, Python backend, the same estimator file). Each answer is checked with a
real gRPC client first; CPU per call counts every process of each server (Triton's
backend stubs included). inferd/floor is what inferd keeps of grpcio's ceiling."""
    defaults = {"connections": [32]}
    compares_mlserver = False

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_load_arguments(parser, streams=4, encoding="raw", why=" (tritonclient: raw)")
        parser.add_argument(
            "--triton-python",
            default=os.environ.get(TRITON_PYTHON_ENV),
            help=f"a Python with nvidia-pytriton, scikit-learn, joblib (or ${TRITON_PYTHON_ENV})",
        )
        parser.add_argument(
            "--triton-instances", type=int, default=2, help="the Python backend's instance count"
        )
        parser.add_argument(
            "--no-default", action="store_true", help="leave out inferd at its default layout"
        )
        parser.add_argument(
            "--envoy-floor",
            metavar="PYVOY",
            help="also run the floor and inferd's gRPC service in Envoy, under this pyvoy "
            "(a virtualenv with pyvoy and inferd: pip install -e '.[sklearn]' pyvoy)",
        )

    def contenders(self) -> list[Contender]:
        args = self.options.args
        contenders = [Contender(FLOOR, FLOOR), Contender(INFERD, INFERD, protocol_processes=1)]
        if not args.no_default:
            contenders.append(Contender(INFERD_DEFAULT, INFERD, protocol_processes=None))
        if args.envoy_floor:
            contenders.append(Contender(ENVOY_FLOOR, ENVOY_FLOOR))
            contenders.append(Contender(INFERD_ENVOY, ENVOY_FLOOR))
        if args.triton_python:
            contenders.append(Contender(TRITON, TRITON))
        return contenders

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        if contender.kind != TRITON:
            write_sklearn_model(repo, self.model, self.estimator)
            if contender.label == INFERD_ENVOY:
                (repo / INFERD_MARKER).write_text(str(BENCHMARKS_DIR / "grpc_floor_asgi.py"))
            return
        version = repo / self.model / "1"
        version.mkdir(parents=True)
        joblib.dump(self.estimator, version / MODEL_FILE)
        (version / "model.py").write_text(
            TRITON_MODEL.format(model_file=MODEL_FILE, input=INPUT_NAME)
        )
        instances = self.options.args.triton_instances
        config = TRITON_CONFIG.format(input=INPUT_NAME, instances=instances)
        (repo / self.model / "config.pbtxt").write_text(config)

    def describe(self) -> str:
        triton = self.options.args.triton_python
        return super().describe() + (f", Triton from {triton}" if triton else ", no Triton")

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        pairs = [(INFERD, FLOOR), (INFERD_DEFAULT, FLOOR), (TRITON, FLOOR),
                 (INFERD, TRITON), (INFERD_DEFAULT, TRITON), (ENVOY_FLOOR, FLOOR),
                 (INFERD_ENVOY, ENVOY_FLOOR), (INFERD_ENVOY, INFERD),
                 (INFERD_ENVOY, TRITON)]  # fmt: skip
        return [p for p in pairs if set(p) <= set(labels)] + baseline_pairs(labels)

    def notes(self, summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
        return ["inferd/floor: what inferd keeps of grpcio's ceiling (the floor: grpcio alone)"]
