"""Model repositories the scenarios write: ``settings.json`` and model folders.

The same layout serves inferd and MLServer (``mlserver_sklearn.SKLearnModel`` is
an implementation both load), so a comparison runs both on identical files.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import joblib
import numpy as np

from benchmarks.common.models import write_model_folder

MODEL_FILE = "model.joblib"
SKLEARN_IMPLEMENTATION = "mlserver_sklearn.SKLearnModel"
ROW = [5.1, 3.5, 1.4, 0.2]
EXAMPLE_TRAINER = Path(__file__).resolve().parent.parent / "examples" / "train_sklearn.py"


def settings_json(ports: Sequence[int], *layers: Mapping[str, Any]) -> dict[str, Any]:
    """settings.json: the ports, then each layer of settings over the previous ones."""
    http, grpc, metrics = ports
    settings: dict[str, Any] = {
        "host": "127.0.0.1",
        "http_port": http,
        "grpc_port": grpc,
        "metrics_port": metrics,
    }
    for layer in layers:
        settings.update(layer)
    return settings


def write_json(path: Path, content: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(content), indent=2) + "\n")


def example_model() -> Any:
    """The bundled example model, trained as examples/train_sklearn.py trains it."""
    spec = importlib.util.spec_from_file_location("train_sklearn", EXAMPLE_TRAINER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.train()


def predicted_class(model: Any, row: Sequence[float] = ROW) -> int:
    return int(model.predict(np.asarray([row], dtype=np.float32))[0])


def predict_ms(estimator: Any, row: Sequence[float], calls: int = 20) -> float:
    """CPU milliseconds per one-row predict, of this thread (the estimators run one job):
    unlike the time on the clock, other work on the machine does not inflate it."""
    batch = np.asarray([row], dtype=np.float32)
    estimator.predict(batch)
    began = time.thread_time()
    for _ in range(calls):
        estimator.predict(batch)
    return (time.thread_time() - began) / calls * 1000


def write_sklearn_model(
    repo: Path,
    name: str,
    model: Any,
    *,
    implementation: str = SKLEARN_IMPLEMENTATION,
    fields: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """``repo/name/{model-settings.json, model.joblib}``; ``fields`` are added to
    model-settings.json (e.g. batching), ``extra`` is its ``parameters.extra``."""
    parameters: dict[str, Any] = {"uri": f"./{MODEL_FILE}"}
    if extra:
        parameters["extra"] = dict(extra)
    settings = {"parameters": parameters, **(fields or {})}
    folder = write_model_folder(repo, name, implementation, **settings)
    joblib.dump(model, folder / MODEL_FILE)
    return folder


# A CPU-bound model: both servers' runtime classes in one module, copied into the model's
# folder; each server imports the one its framework offers.
BUSY_MODULE = '''\
"""A CPU-bound model: a pure-Python loop of about {ms} ms per call, then y = 2x."""

ITERATIONS = {iterations}


def spin(iterations=ITERATIONS):
    total = 0
    for i in range(iterations):
        total += i * i
    return total


try:
    from inferd import InferenceResponse, Model, Tensor

    class BusyInferd(Model):
        def predict(self, request):
            x = request.inputs[0].data
            spin()
            return InferenceResponse(outputs=[Tensor("y", x * 2)])

except ImportError:
    pass

try:
    from mlserver import MLModel
    from mlserver.codecs import NumpyCodec
    from mlserver.types import InferenceResponse as MLServerResponse

    class BusyMLServer(MLModel):
        async def predict(self, payload):
            x = NumpyCodec.decode_input(payload.inputs[0])
            spin()
            return MLServerResponse(
                model_name=self.name, outputs=[NumpyCodec.encode_output("y", x * 2)]
            )

except ImportError:
    pass
'''


def busy_module(ms: float, iterations: int) -> str:
    return BUSY_MODULE.format(ms=ms, iterations=iterations)


def write_busy_model(repo: Path, implementation: str, ms: float, iterations: int) -> Path:
    """``repo/busy``: the CPU-bound model, served by ``busy.<implementation>``."""
    files = {"busy.py": busy_module(ms, iterations)}
    return write_model_folder(repo, "busy", implementation, files=files)


# A model with a known service time: it sleeps (holding its worker) then answers y = 2x.
SLEEP_MODULE = '''\
"""Sleeps {ms} ms per call (a known service time), then y = 2x."""

import time

SECONDS = {ms} / 1000

try:
    from inferd import InferenceResponse, Model, Tensor

    class SleepInferd(Model):
        def predict(self, request):
            time.sleep(SECONDS)
            return InferenceResponse(outputs=[Tensor("y", request.inputs[0].data * 2)])

except ImportError:
    pass

try:
    from mlserver import MLModel
    from mlserver.codecs import NumpyCodec
    from mlserver.types import InferenceResponse as MLServerResponse

    class SleepMLServer(MLModel):
        async def predict(self, payload):
            time.sleep(SECONDS)  # blocks its worker, as a model busy computing does
            x = NumpyCodec.decode_input(payload.inputs[0])
            return MLServerResponse(
                model_name=self.name, outputs=[NumpyCodec.encode_output("y", x * 2)]
            )

except ImportError:
    pass
'''


def write_sleep_model(
    repo: Path, implementation: str, ms: float, fields: Mapping[str, Any] | None = None
) -> Path:
    """``repo/sleep``: the model of known service time, served by ``sleep.<implementation>``;
    ``fields`` are added to its model-settings.json."""
    files = {"sleep.py": SLEEP_MODULE.format(ms=ms)}
    return write_model_folder(repo, "sleep", implementation, files=files, **(fields or {}))


# A streaming model: one request holding a count N, answered by N responses of one INT32
# each (0..N-1), yielded as fast as the server takes them. Both servers' runtime classes
# in one module, as for the busy model.
COUNT_MODULE = '''\
"""Streams N responses of one INT32 each (0, 1, ..., N-1) for a request holding N."""

import numpy as np

try:
    from inferd import InferenceResponse, Model, Tensor

    class CountInferd(Model):
        async def predict_stream(self, request):
            count = int(request.inputs[0].data.reshape(-1)[0])
            for index in range(count):
                yield InferenceResponse(outputs=[Tensor("i", np.array([index], np.int32))])

except ImportError:
    pass

try:
    from mlserver import MLModel
    from mlserver.codecs import NumpyCodec
    from mlserver.types import InferenceResponse as MLServerResponse

    class CountMLServer(MLModel):
        async def predict_stream(self, payloads):
            async for payload in payloads:
                count = int(NumpyCodec.decode_input(payload.inputs[0]).reshape(-1)[0])
                for index in range(count):
                    output = NumpyCodec.encode_output("i", np.array([index], np.int32))
                    yield MLServerResponse(model_name=self.name, outputs=[output])

except ImportError:
    pass
'''


def write_count_model(repo: Path, implementation: str, name: str = "count") -> Path:
    """``repo/<name>``: the streaming model, served by ``count.<implementation>``."""
    return write_model_folder(repo, name, implementation, files={"count.py": COUNT_MODULE})


def v2_request(
    rows: Any, *, name: str = "input-0", datatype: str = "FP32", outputs: Sequence[str] = ()
) -> dict[str, Any]:
    """A V2 REST inference request with one tensor (rows: a 2-D array-like)."""
    array = np.asarray(rows)
    request: dict[str, Any] = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "data": array.ravel().tolist(),
            }
        ]
    }
    if outputs:
        request["outputs"] = [{"name": output} for output in outputs]
    return request
