"""scikit-learn served plain vs ``accelerate: "onnx"``, side by side in one run.

The example model (``examples/train_sklearn.py``: a LogisticRegression on iris)
is served twice by one inferd server, from the same artifact: ``iris`` plain
and ``iris-onnx`` with ``parameters.extra.accelerate: "onnx"``. The benchmark

1. checks both answer a sample of rows identically (labels) and within 1e-3
   (probabilities), and that the accelerated one really runs on ONNX Runtime;
2. measures the model's own time per call: ``SKLearnModel.predict`` on a
   request, in this process, for a 1-row and a 64-row request (median of
   repeats, outputs ``predict`` and ``predict_proba``);
3. drives ``POST /v2/models/{name}/infer`` with ``wrk`` (one row, outputs
   ``predict`` and ``predict_proba``), alternating the order between rounds.

Run from the repository root::

    .venv/bin/python benchmarks/bench_sklearn_onnx.py --duration 10 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import joblib
import numpy as np
from common import ServerPorts, ServerProcess, post_json, run_wrk, write_settings

from inferd.runtimes.sklearn import SKLearnModel
from inferd.settings_loader import model_settings_from_dict
from inferd.types import InferenceRequest, RequestedOutput, Tensor

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_TRAINER = ROOT / "examples" / "train_sklearn.py"

MODELS = {"iris": {}, "iris-onnx": {"accelerate": "onnx"}}
OUTPUTS = ("predict", "predict_proba")
ROW = [5.1, 3.5, 1.4, 0.2]
WRK_BODY = {
    "inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP64", "data": ROW}],
    "outputs": [{"name": name} for name in OUTPUTS],
}


def example_model() -> Any:
    """The bundled example model, trained as examples/train_sklearn.py trains it."""
    spec = importlib.util.spec_from_file_location("train_sklearn", EXAMPLE_TRAINER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.train()


def write_repository(repository: Path, ports: ServerPorts, workers: int) -> None:
    estimator = example_model()
    repository.mkdir(parents=True)
    write_settings(repository, ports, workers, {"debug": False})
    for name, extra in MODELS.items():
        folder = repository / name
        folder.mkdir()
        joblib.dump(estimator, folder / "model.joblib")
        settings = {
            "name": name,
            "implementation": "inferd.runtimes.sklearn.SKLearnModel",
            "parameters": {"uri": "./model.joblib", "extra": extra},
        }
        (folder / "model-settings.json").write_text(json.dumps(settings))


# ---- the model's own time per call ------------------------------------------------


def load_runtime(repository: Path, name: str) -> SKLearnModel:
    folder = repository / name
    data = json.loads((folder / "model-settings.json").read_text())
    model = SKLearnModel(model_settings_from_dict(data, folder / "model-settings.json"))
    asyncio.run(model.load())
    return model


def per_call_us(model: SKLearnModel, rows: int, repeats: int, calls: int) -> float:
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
    for name in MODELS:
        model = load_runtime(repository, name)
        expect_accelerated = bool(MODELS[name])
        if (model._accelerator is not None) != expect_accelerated:
            sys.exit(f"{name}: accelerated is {model._accelerator is not None}, expected otherwise")
        times[name] = {rows: per_call_us(model, rows, repeats, 500) for rows in (1, 64)}
    return times


# ---- over HTTP ----------------------------------------------------------------------


def check_answers(url: str) -> None:
    rows = np.random.default_rng(0).uniform([4, 2, 1, 0], [8, 4.5, 7, 2.5], size=(50, 4))
    body = {
        "inputs": [
            {"name": "input-0", "shape": [50, 4], "datatype": "FP64", "data": rows.ravel().tolist()}
        ],
        "outputs": [{"name": name} for name in OUTPUTS],
    }
    answers = {}
    for name in MODELS:
        status, reply = post_json(f"{url}/v2/models/{name}/infer", body)
        if status != 200:
            sys.exit(f"{name}: HTTP {status}: {reply}")
        answers[name] = {out["name"]: np.array(out["data"]) for out in reply["outputs"]}
    plain, fast = answers["iris"], answers["iris-onnx"]
    if not np.array_equal(plain["predict"], fast["predict"]):
        sys.exit("iris-onnx predicts other labels than iris")
    if not np.allclose(plain["predict_proba"], fast["predict_proba"], rtol=1e-3, atol=1e-6):
        sys.exit("iris-onnx probabilities differ from iris by more than 1e-3")


def http_rounds(url: str, options: argparse.Namespace) -> dict[str, list[float]]:
    body = json.dumps(WRK_BODY)
    names = list(MODELS)
    for name in names:  # warm-up, discarded
        run_wrk(f"{url}/v2/models/{name}/infer", body, duration_s=options.warmup)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(options.rounds):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            result = run_wrk(
                f"{url}/v2/models/{name}/infer",
                body,
                connections=options.connections,
                duration_s=options.duration,
            )
            if result.errors:
                sys.exit(f"{name}: {result.errors} errors during the run")
            rates[name].append(result.requests_per_s)
            print(
                f"  round {round_index + 1} {name:10s} {result.requests_per_s:9.0f} req/s  "
                f"p50 {result.p50_ms:6.2f} ms  p99 {result.p99_ms:6.2f} ms",
                flush=True,
            )
    return rates


def report(times: dict[str, dict[int, float]], rates: dict[str, list[float]]) -> dict[str, Any]:
    print("\nmodel's own time per call (SKLearnModel.predict, predict + predict_proba):")
    for rows in (1, 64):
        plain, fast = times["iris"][rows], times["iris-onnx"][rows]
        print(f"  {rows:3d} rows: plain {plain:8.1f} us  onnx {fast:8.1f} us  x{plain / fast:.1f}")
    median = {name: statistics.median(values) for name, values in rates.items()}
    print("\nHTTP, one row per request (median of rounds):")
    print(f"  plain {median['iris']:8.0f} req/s  onnx {median['iris-onnx']:8.0f} req/s  "
          f"x{median['iris-onnx'] / median['iris']:.2f}")  # fmt: skip
    return {"per_call_us": times, "requests_per_s": rates, "median_requests_per_s": median}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="wrk seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="wrk warm-up seconds")
    parser.add_argument("--rounds", type=int, default=2, help="order alternates between rounds")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--parallel-workers", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=7, help="per-call timing repeats")
    parser.add_argument("--json-out", type=Path, help="write the results as JSON")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-sklearn-onnx-") as temporary:
        repository = Path(temporary) / "repository"
        ports = ServerPorts.allocate()
        write_repository(repository, ports, options.parallel_workers)
        times = model_call_times(repository, options.repeats)
        command = [sys.executable, "-m", "inferd", "start", str(repository)]
        with ServerProcess(command, ROOT, Path(temporary) / "inferd.log") as server:
            url = f"http://127.0.0.1:{ports.http}"
            server.wait_ready(url)
            check_answers(url)
            rates = http_rounds(url, options)
    results = report(times, rates)
    if options.json_out:
        options.json_out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
