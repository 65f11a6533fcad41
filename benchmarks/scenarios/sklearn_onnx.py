"""scikit-learn served plain vs ``accelerate: "onnx"``, side by side in one run."""

from __future__ import annotations

import argparse
import asyncio
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
from ..repository import ROW, example_model, v2_request, write_sklearn_model
from ..servers import BASELINE_SUFFIX, INFERD, Contender, baseline_pairs
from .base import Case, Scenario, VerificationError, post_json

MODELS: dict[str, dict[str, Any]] = {"iris": {}, "iris-onnx": {"accelerate": "onnx"}}
PLAIN, ACCELERATED = MODELS
OUTPUTS = ("predict", "predict_proba")
IMPLEMENTATION = "inferd.runtimes.sklearn.SKLearnModel"
WRK_REQUEST = v2_request([ROW], datatype="FP64", outputs=OUTPUTS)


class SklearnOnnx(Scenario):
    name = "sklearn-onnx"
    description = """scikit-learn plain vs accelerate "onnx": the example model served twice.

One inferd repository holds the example model (examples/train_sklearn.py) twice,
from the same artifact: iris plain and iris-onnx with parameters.extra.accelerate
"onnx". The scenario
1. measures the model's own time per call in this process (SKLearnModel.predict,
   outputs predict and predict_proba, 1 and 64 rows, median of --repeats);
2. checks both models answer 50 rows with the same labels and probabilities
   within 1e-3 before each run;
3. drives POST /v2/models/{name}/infer with wrk (one FP64 row, both outputs),
   the two models taking turns."""
    defaults = {"warmup": 2.0}
    compares_mlserver = False
    settings = {"debug": False}

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--repeats", type=int, default=7, help="per-call timing repeats")

    def contenders(self) -> list[Contender]:
        return [Contender(name, INFERD, model=name) for name in MODELS]

    @cached_property
    def estimator(self) -> Any:
        return example_model()

    def write_repository(self, repo: Path, contender: Contender, case: Case) -> None:
        self.write_models(repo)

    def write_models(self, repo: Path) -> None:
        for name, extra in MODELS.items():
            write_sklearn_model(
                repo, name, self.estimator, implementation=IMPLEMENTATION, extra=extra
            )

    def verify(self, server: ServerProcess, contender: Contender, case: Case) -> Target:
        check_same_answers(server.url)
        url = f"{server.url}/v2/models/{self.model_of(contender, case)}/infer"
        status, answer = post_json(url, WRK_REQUEST)
        if status != 200:
            raise VerificationError(f"POST {url} -> HTTP {status}: {answer}")
        return Target(url, json.dumps(WRK_REQUEST).encode())

    def comparisons(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        pairs = [(ACCELERATED + tree, PLAIN + tree) for tree in ("", BASELINE_SUFFIX)]
        return [p for p in pairs if set(p) <= set(labels)] + baseline_pairs(labels)

    def measure_in_process(self) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="inferd-bench-onnx-") as folder:
            self.write_models(Path(folder))
            return {"per_call_us": model_call_times(Path(folder), self.options.args.repeats)}

    def report_in_process(self, figures: Mapping[str, Any]) -> list[str]:
        times = figures["per_call_us"]
        lines = ["model's own time per call (SKLearnModel.predict, predict + predict_proba):"]
        for rows in (1, 64):
            plain, fast = times[PLAIN][rows], times[ACCELERATED][rows]
            lines.append(
                f"  {rows:3d} rows: plain {plain:8.1f} us  onnx {fast:8.1f} us  x{plain / fast:.1f}"
            )
        return lines


def check_same_answers(url: str) -> None:
    """Both models give the same labels, and probabilities within 1e-3, for 50 rows."""
    rows = np.random.default_rng(0).uniform([4, 2, 1, 0], [8, 4.5, 7, 2.5], size=(50, 4))
    body = v2_request(rows, datatype="FP64", outputs=OUTPUTS)
    answers = {}
    for name in MODELS:
        status, reply = post_json(f"{url}/v2/models/{name}/infer", body)
        if status != 200:
            raise VerificationError(f"{name}: HTTP {status}: {reply}")
        answers[name] = {out["name"]: np.array(out["data"]) for out in reply["outputs"]}
    plain, fast = answers[PLAIN], answers[ACCELERATED]
    if not np.array_equal(plain["predict"], fast["predict"]):
        raise VerificationError(f"{ACCELERATED} predicts other labels than {PLAIN}")
    if not np.allclose(plain["predict_proba"], fast["predict_proba"], rtol=1e-3, atol=1e-6):
        raise VerificationError(f"{ACCELERATED} probabilities differ from {PLAIN} by > 1e-3")


def load_runtime(repository: Path, name: str) -> Any:
    from inferd.runtimes.sklearn import SKLearnModel
    from inferd.settings.loader import model_settings_from_dict

    source = repository / name / "model-settings.json"
    model = SKLearnModel(model_settings_from_dict(json.loads(source.read_text()), source))
    asyncio.run(model.load())
    return model


def per_call_us(model: Any, rows: int, repeats: int, calls: int) -> float:
    from inferd.types import InferenceRequest, RequestedOutput, Tensor

    features = np.tile(np.array(ROW), (rows, 1))
    request = InferenceRequest(
        inputs=[Tensor("input-0", features)], outputs=[RequestedOutput(n) for n in OUTPUTS]
    )
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            model.predict(request)
        timings.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(timings)


def model_call_times(repository: Path, repeats: int) -> dict[str, dict[int, float]]:
    times: dict[str, dict[int, float]] = {}
    for name, extra in MODELS.items():
        model = load_runtime(repository, name)
        if (model._accelerator is not None) != bool(extra):
            raise VerificationError(f"{name}: accelerated is {model._accelerator is not None}")
        times[name] = {rows: per_call_us(model, rows, repeats, 500) for rows in (1, 64)}
    return times
