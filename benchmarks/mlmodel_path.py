"""inferd's CPU per request for an MLServer ``MLModel`` runtime, without a transport.

The ``mlmodel`` scenario's iris runtime (IRIS_RUNTIME: decode with NumpyCodec,
sklearn predict, NumpyCodec.encode_output) and the same estimator as inferd's own
sklearn runtime, each called as a request with ``parallel_workers: 1`` goes:
decode the REST body (as the REST route does), headers to the runtime (only the
MLModel asks for them), pack the request for the worker and unpickle it there,
the runtime's predict (an ``async def`` one on a loop thread, as a worker runs
it), the answer packed back and unpickled, response headers taken out, the REST
body encoded. No socket and no second process: the differences are what the
MLModel adapter costs per request (CPU of all threads); the model call alone is
the floor both share.

``--worker`` then sends the same requests through ``DataPlane.infer`` to a real
worker process (``parallel_workers: 1``), one at a time, and reports the CPU the
main process and the worker each spend per request (the worker's from
``/proc``, Linux only, in 10 ms ticks: use a few thousand calls).

    python -m benchmarks mlmodel-path [--calls 2000] [--rounds 3] [--worker]
"""

from __future__ import annotations

import asyncio
import pickle
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import joblib
import numpy as np
import orjson

from benchmarks.common.models import SKLEARN, train_iris, write_model_folder
from benchmarks.common.procstat import cpu_seconds
from benchmarks.options import add_json_out, command_parser
from benchmarks.results import write_command_record
from inferd.context import RequestContext
from inferd.model import WorkerContext
from inferd.observability.stats import ModelStatsTable
from inferd.server.rest.codec import decode_infer_request, encode_infer_response
from inferd.serving.dataplane import DataPlane
from inferd.serving.registry import Registry
from inferd.serving.repository import ModelRepository
from inferd.serving.runtime_headers import pass_headers, take_response_headers
from inferd.settings import ServerSettings
from inferd.types import InferenceResponse
from inferd.workers import ipc
from inferd.workers.loaded_model import LoadedModel
from inferd.workers.pool import ProcessPool

from .repository import MODEL_FILE, ROW, v2_request
from .scenarios.mlmodel import IRIS_RUNTIME

T = TypeVar("T")
Call = Callable[[], bytes]
# What wrk sends, as the REST edge hands a request's headers on (names lower case).
HEADERS = {"host": "127.0.0.1:8080", "content-type": "application/json", "content-length": "76"}


def main(argv: Sequence[str]) -> None:
    parser = command_parser("mlmodel-path", __doc__)
    parser.add_argument("--calls", type=int, default=2000, help="requests per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help="also through a worker process")
    add_json_out(parser)
    args = parser.parse_args(argv)
    runs = measure(args.calls, args.rounds)
    if args.worker:
        runs += asyncio.run(measure_worker(args.calls, args.rounds))
    write_command_record(args.json_out, "mlmodel-path", args, runs)


def measure(calls: int, rounds: int) -> list[dict[str, Any]]:
    """Print, per round, the CPU microseconds each path spends per request; a row each."""
    estimator = train_iris()
    loop = asyncio.new_event_loop()  # the worker's loop thread: async runtimes run there
    thread = threading.Thread(target=loop.run_forever, name="worker-loop", daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory(prefix="inferd-mlmodel-path-") as folder:
            repo = Path(folder)
            _write_models(repo, estimator)
            mlmodel, native = _load(repo, "iris-mlmodel", loop), _load(repo, "iris", loop)
            body = orjson.dumps(v2_request([ROW]))
            paths = {
                "model alone": _model_alone(estimator),
                "native runtime": _served(native, body, loop, wants_headers=False),
                "MLModel runtime": _served(mlmodel, body, loop, wants_headers=True),
            }
            native_answer = orjson.loads(paths["native runtime"]())
            mlmodel_answer = orjson.loads(paths["MLModel runtime"]())
            assert _classes(native_answer) == _classes(mlmodel_answer), "the runtimes disagree"
            rows = []
            for round_ in range(rounds):
                spent = _round(paths, calls)
                cells = [f"{name} {us:7.2f}" for name, us in spent.items()]
                print(f"round {round_}: CPU us/request: " + "  ".join(cells))
                rows += [_row(name, round_, us) for name, us in spent.items()]
            for loaded in (mlmodel, native):
                _on(loop, loaded.release())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
    return rows


async def measure_worker(calls: int, rounds: int) -> list[dict[str, Any]]:
    """Print, per round, the CPU microseconds the main process and the worker spend
    per request, each runtime served by one worker process; a row each."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="inferd-mlmodel-worker-") as folder:
        repo = Path(folder)
        _write_models(repo, train_iris())
        settings = ServerSettings(parallel_workers=1)
        pool = ProcessPool(settings)
        await pool.start()
        registry = Registry(pool, ModelStatsTable(observe=True))
        try:
            dataplane = DataPlane(settings, registry, ModelRepository(repo))
            names = {"native runtime": "iris", "MLModel runtime": "iris-mlmodel"}
            for name in names.values():
                await registry.load(name, ModelRepository(repo).find(name))
            worker = pool.workers[0].pid
            assert worker is not None
            body = orjson.dumps(v2_request([ROW]))
            for round_ in range(rounds):
                cells = []
                for label, name in names.items():
                    main, in_worker = await _through_worker(dataplane, name, body, worker, calls)
                    cells.append(f"{label} main {main:7.2f} worker {in_worker:7.2f}")
                    row = _row(f"{label} through a worker", round_, main)
                    rows.append(row | {"worker_cpu_us_per_request": in_worker})
                print(f"worker round {round_}: CPU us/request: " + "  ".join(cells))
        finally:
            await registry.close()
            await pool.close()
    return rows


def _row(label: str, round_: int, us_per_request: float) -> dict[str, Any]:
    return {"label": label, "round": round_, "cpu_us_per_request": us_per_request}


async def _through_worker(
    dataplane: DataPlane, name: str, body: bytes, worker: int, calls: int
) -> tuple[float, float]:
    started, worker_started = time.process_time(), cpu_seconds(worker)
    for _ in range(calls):
        request, form = decode_infer_request(body, None)
        response = await dataplane.infer(name, None, request, RequestContext(headers=HEADERS))
        encode_infer_response(response, form)
    main = time.process_time() - started
    in_worker = cpu_seconds(worker) - worker_started
    return main / calls * 1e6, in_worker / calls * 1e6


def _round(paths: dict[str, Call], calls: int) -> dict[str, float]:
    """CPU us per request of each path."""
    spent = {}
    for name, run in paths.items():
        started = time.process_time()  # all threads: the loop thread's share counts
        for _ in range(calls):
            run()
        spent[name] = (time.process_time() - started) / calls * 1e6
    return spent


def _classes(answer: dict[str, Any]) -> list[Any]:
    return [output["data"] for output in answer["outputs"]]


def _write_models(repo: Path, estimator: Any) -> None:
    mlmodel = write_model_folder(
        repo,
        "iris-mlmodel",
        "models.IrisModel",
        name=None,
        files={"models.py": IRIS_RUNTIME},
        parameters={"uri": f"./{MODEL_FILE}"},
    )
    joblib.dump(estimator, mlmodel / MODEL_FILE)
    native = write_model_folder(repo, "iris", SKLEARN, name=None, parameters={"uri": "."})
    joblib.dump(estimator, native / MODEL_FILE)


def _on(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def _load(repo: Path, name: str, loop: asyncio.AbstractEventLoop) -> LoadedModel:
    (settings,) = ModelRepository(repo).find(name)
    loaded = _on(loop, LoadedModel.load(settings, WorkerContext(0, None)))
    sys.modules.pop("models", None)  # the runtime's module stays loaded, by its class
    return loaded


def _model_alone(estimator: Any) -> Call:
    features = np.asarray([ROW], dtype=np.float32)

    def run() -> bytes:
        estimator.predict(features)
        return b""

    return run


def _served(
    loaded: LoadedModel, body: bytes, loop: asyncio.AbstractEventLoop, *, wants_headers: bool
) -> Call:
    """The request's way through the server and a worker (as workers/worker.py runs
    it: async predicts on the loop thread), the IPC socket left out."""
    runs_inline = getattr(loaded, "runs_inline", None)  # absent before it was added

    def run() -> bytes:
        context = RequestContext(headers=HEADERS)
        request, form = decode_infer_request(body, None)
        if wants_headers:
            pass_headers(request, context)
        crossed = ipc.unpack_request(_pickled(ipc.pack_request(request)))
        if loaded.is_async and not (runs_inline and runs_inline(crossed)):
            response = _on(loop, loaded.call_async(crossed))
        else:
            response = loaded.call_sync(crossed)
        answer: InferenceResponse = ipc.unpack_response(_pickled(ipc.pack_response(response)))
        if wants_headers:
            take_response_headers(answer, context)
        encoded, _ = encode_infer_response(answer, form)
        return encoded

    return run


def _pickled(packed: Any) -> Any:
    """Through pickle as the IPC frame carries it (these arrays are small: in band)."""
    return pickle.loads(pickle.dumps(packed, protocol=5))
